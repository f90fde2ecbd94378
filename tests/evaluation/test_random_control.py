"""Many random masks of the learned mask's shape, each evaluated as the learned mask is."""

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import HeadMask, Task
from headsup_lens.evaluation import EvalConfig, RandomMaskControl, evaluate, random_mask_control

PAIRS = [(w, w[::-1]) for w in ["cat", "sun", "red", "top", "hot", "big", "mud", "pan"]]


@pytest.fixture(scope="module")
def task():
    return Task.from_pairs("reverse", PAIRS, instruction="Reverse {input}:", n_eval=4)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**16), st.floats(0.1, 0.9))
def test_a_layer_shuffle_keeps_each_layers_count(n_layers, n_heads, seed, p):
    values = (torch.rand(n_layers, n_heads, generator=torch.Generator().manual_seed(seed)) < p).float()
    mask = HeadMask(values)
    shuffled = mask.shuffled(seed, within="layer")
    assert torch.equal(shuffled.values.sum(1), values.sum(1))
    assert torch.equal(mask.shuffled(seed, within="layer").values, shuffled.values)  # the seed decides
    assert shuffled.metadata["shuffled_within"] == "layer" and "shuffled_within" not in mask.shuffled(seed).metadata


def test_every_draw_is_the_evaluation_of_its_shuffled_mask(llama, task):
    logits = torch.randn(llama.cfg.n_layers, llama.cfg.n_heads, generator=torch.Generator().manual_seed(1))
    mask = HeadMask.from_logits(logits + 0.3, task="reverse")
    config = EvalConfig(progress=False, max_new_tokens=3)
    control = random_mask_control(llama, task, mask, config, n_draws=3, seed=10)
    draws = control.draws
    assert draws["mask"].tolist() == ["learned", "random", "random", "random"] and control.n_draws == 3
    assert draws.draw.tolist() == [-1, 0, 1, 2] and draws.seed.tolist()[1:] == [10, 11, 12]
    for row in draws.itertuples():
        each = mask if row.draw < 0 else mask.shuffled(int(row.seed), within="layer")
        reference = evaluate(llama, task, each, EvalConfig(progress=False, max_new_tokens=3, settings=("masked",)))
        masked = reference.table.iloc[0]
        assert row.strict == masked.strict and row.accuracy == masked.accuracy
        assert row.answer_nll == pytest.approx(masked.answer_nll, rel=1e-6) and row.n_kept == mask.n_kept
        outputs = control.generations.loc[control.generations.draw == row.draw].output.tolist()
        assert outputs == reference.generations.output.tolist()


def draws_table(learned: float, random: list[float]) -> pd.DataFrame:
    rows = [{"mask": "learned", "draw": -1, "strict": learned, "answer_nll": 1.0}]
    rows += [{"mask": "random", "draw": k, "strict": v, "answer_nll": 2.0 - v} for k, v in enumerate(random)]
    return pd.DataFrame(rows)


@given(st.floats(0, 1), st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_the_summary_places_the_learned_mask_among_the_draws(learned, random):
    control = RandomMaskControl("t", "layer", draws_table(learned, random), pd.DataFrame())
    row = control.summary(("strict",)).iloc[0]
    at_least = sum(v >= learned for v in random)
    assert row.at_least == at_least and row.p == (1 + at_least) / (1 + len(random))
    assert row.learned_rank == 1 + sum(v > learned for v in random) and row.n_draws == len(random)
    assert min(random) <= row.random_low <= row.random_high <= max(random)


def test_a_loss_is_better_when_lower():
    draws = pd.DataFrame(
        [{"mask": "learned", "draw": -1, "answer_nll": 1.0}]
        + [{"mask": "random", "draw": k, "answer_nll": v} for k, v in enumerate([0.8, 1.2, 1.0, 3.0])]
    )
    loss = RandomMaskControl("t", "layer", draws, pd.DataFrame()).summary(("answer_nll",)).iloc[0]
    assert loss.at_least == 2 and loss.learned_rank == 2 and loss.p == pytest.approx(3 / 5)
