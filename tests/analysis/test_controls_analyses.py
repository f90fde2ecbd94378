"""Fig. 2 as switch rates over many inputs and Fig. 6 with per-example losses and random head sets,
each against a plain computation: the model's own forward pass under the value gate."""

import numpy as np
import pandas as pd
import pytest
import torch

from headsup_lens import HeadMask, Task
from headsup_lens.analysis import AlphaControl, SwitchRates, alpha_control, alpha_grid, switch_rates, weight_order
from headsup_lens.analysis._common import prompt_ids, prompt_text, token_id
from headsup_lens.evaluation import answer_loss, mcnemar_exact
from headsup_lens.gates import value_gate

from ..conftest import random_mask

PAIRS = [("cat", "dog"), ("sun", "moon"), ("red", "blue"), ("up", "down"), ("hot", "cold"), ("big", "small")]


@pytest.fixture(scope="module")
def task():
    return Task.from_pairs("opposites", PAIRS, instruction="Opposite of {input}:", n_eval=4)


@pytest.fixture(scope="module")
def mask(llama):
    logits = torch.randn(llama.cfg.n_layers, llama.cfg.n_heads, generator=torch.Generator().manual_seed(5))
    return HeadMask.from_logits(logits + 0.5)


def top1_at(model, prompt: str, order, step: int) -> int:
    """The next token after removing the first `step` heads of `order`: one plain forward pass."""
    keep = torch.ones(model.cfg.n_layers, model.cfg.n_heads)
    for layer, head in order[:step]:
        keep[layer, head] = 0
    ids = torch.tensor([prompt_ids(model, prompt)])
    with torch.no_grad(), value_gate(model, keep):
        return int(model(ids)[0, -1].argmax())


def test_switch_steps_are_the_first_step_whose_top_token_is_the_answer(llama, task, mask):
    rates = switch_rates(llama, task, mask, stride=2, progress_bar=False)
    removed = llama.cfg.n_layers * llama.cfg.n_heads - mask.n_kept
    table = rates.table
    assert len(table) == 2 * len(task.eval_pairs) and set(table.order) == {"weight", "random"}
    assert (table.last_step == removed).all() and (table.stride == 2).all()
    steps = sorted(set(range(0, removed + 1, 2)) | {removed})
    from headsup_lens.analysis import random_order

    for row in table.itertuples():
        prompt = task.user_text(row.input)
        order = weight_order(mask) if row.order == "weight" else random_order(llama, seed=int(row.random_seed))
        target = token_id(llama, row.answer, after=prompt_text(llama, prompt))
        tops = [top1_at(llama, prompt, order, s) for s in steps]
        first = next((s for s, t in zip(steps, tops) if t == target), None)
        assert (np.isnan(row.switch_step) and first is None) or row.switch_step == first
        assert row.at_start == (first == 0) and row.switched == (first is not None and first > 0)


def test_the_shuffled_baseline_removes_the_same_heads_in_another_order(llama, task, mask):
    from headsup_lens.analysis._switch import shuffled_order

    rates = switch_rates(llama, task, mask, stride=3, baseline="shuffled", progress_bar=False)
    table = rates.table
    assert set(table.order) == {"weight", "shuffled"}
    removed = llama.cfg.n_layers * llama.cfg.n_heads - mask.n_kept
    learned = weight_order(mask)
    steps = sorted(set(range(0, removed + 1, 3)) | {removed})
    for row in table.loc[table.order == "shuffled"].itertuples():
        order = shuffled_order(learned, removed, int(row.random_seed))
        assert set(order[:removed]) == set(learned[:removed]) and order[removed:] == learned[removed:]
        prompt = task.user_text(row.input)
        target = token_id(llama, row.answer, after=prompt_text(llama, prompt))
        tops = [top1_at(llama, prompt, order, s) for s in steps]
        first = next((s for s, t in zip(steps, tops) if t == target), None)
        assert (np.isnan(row.switch_step) and first is None) or row.switch_step == first
    # both orders end at the masked model: the same top token at the last step
    assert top1_at(llama, task.user_text(PAIRS[0][0]), learned, removed) == top1_at(
        llama, task.user_text(PAIRS[0][0]), shuffled_order(learned, removed, 7), removed
    )
    summary = rates.summary()
    assert summary.order.tolist() == ["weight", "shuffled"]


def test_switch_summary_counts_rates_and_the_paired_test():
    rows = []
    weight = [True, True, True, False, True, True]
    shuffled = [False, False, True, False, False, False]
    for order, hits in (("weight", weight), ("random", shuffled)):
        for k, hit in enumerate(hits):
            rows.append(
                {
                    "example": k,
                    "order": order,
                    "switch_step": 3.0 if hit else np.nan,
                    "switched": hit,
                    "at_start": False,
                }
            )
    rows.append({"example": 6, "order": "weight", "switch_step": 0.0, "switched": False, "at_start": True})
    rows.append({"example": 6, "order": "random", "switch_step": 0.0, "switched": False, "at_start": True})
    summary = SwitchRates("t", pd.DataFrame(rows)).summary().set_index("order")
    assert summary.loc["weight", "n"] == 6 and summary.loc["weight", "at_start"] == 1  # step 0 is no switch
    assert summary.loc["weight", "switched"] == 5 and summary.loc["random", "switched"] == 1
    assert summary.loc["weight", "p_weight_vs_random"] == pytest.approx(mcnemar_exact(weight, shuffled))
    assert summary.loc["weight", "low"] < 5 / 6 < summary.loc["weight", "high"]


def test_switch_rates_refuse_a_mask_that_removes_nothing(llama, task):
    with pytest.raises(ValueError, match="removes no head"):
        switch_rates(llama, task, HeadMask.full(llama), progress_bar=False)


def test_alpha_control_losses_are_the_instructed_loss_example_by_example(llama, task):
    mask = HeadMask(random_mask(llama, seed=7))
    control = alpha_control(llama, task, mask, alphas=[0.0, 0.5], n_random=2, progress_bar=False)
    curve = control.losses().set_index("alpha").loss
    grid = alpha_grid(llama, task, mask, alphas=[0.0, 0.25, 0.5, 1.0]).set_index("alpha").loss
    assert list(curve.index) == [0.0, 0.25, 0.5, 1.0]  # alpha_test and 1 are always on the grid
    for alpha in curve.index:
        assert curve[alpha] == pytest.approx(grid[alpha], rel=1e-6)
    random = control.table.loc[control.table.head_set == "random set"]
    assert set(random.alpha) == {0.25} and set(random.draw) == {0, 1}
    for draw in (0, 1):
        shuffled = mask.shuffled(draw, within="layer")
        mean = random.loc[random.draw == draw].nll.mean()
        assert mean == pytest.approx(answer_loss(llama, task, mask=shuffled, alpha=0.25, instructed=True), rel=1e-6)
    summary = control.summary().set_index("head_set")
    own = summary.loc["outside the mask"]
    assert own.loss_drop == pytest.approx(grid[1.0] - grid[0.25], rel=1e-5, abs=1e-7)
    assert own.loss_drop_low <= own.loss_drop <= own.loss_drop_high
    assert own.best_alpha == curve.idxmin()
    assert control.n_scaled == llama.cfg.n_layers * llama.cfg.n_heads - mask.n_kept


def test_the_drop_interval_is_a_paired_bootstrap_of_the_examples():
    examples = range(40)
    full = np.linspace(2.0, 3.0, 40)
    rows = [{"head_set": "outside the mask", "draw": -1, "alpha": 1.0, "example": k, "nll": full[k]} for k in examples]
    # the same drop on every example: the interval is that drop exactly
    rows += [
        {"head_set": "outside the mask", "draw": -1, "alpha": 0.25, "example": k, "nll": full[k] - 0.1}
        for k in examples
    ]
    rows += [
        {"head_set": "random set", "draw": 0, "alpha": 0.25, "example": k, "nll": full[k] + (k % 2) - 0.5}
        for k in examples
    ]
    summary = AlphaControl("t", 0.25, 3, pd.DataFrame(rows)).summary().set_index("head_set")
    own, random = summary.loc["outside the mask"], summary.loc["random set"]
    assert own.loss_drop == pytest.approx(0.1) and own.loss_drop_low == pytest.approx(0.1)
    assert own.relative_drop == pytest.approx(0.1 / full.mean())
    assert random.loss_drop == pytest.approx(0.0, abs=1e-12) and random.loss_drop_low < 0 < random.loss_drop_high
