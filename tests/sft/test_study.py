"""The SFT paper's measurements on a run, on hand-made patterns whose statistics are worked out here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from headsup_lens.analysis import gini
from headsup_lens.data import Task
from headsup_lens.masks import HeadMask
from headsup_lens.models import load_model
from headsup_lens.reproduce._sft import base_organism, organism_sft_config, smollm2_sft_config
from headsup_lens.sft import (
    FinetuneConfig,
    FinetuneResult,
    change_consistency,
    composition_fits,
    held_out_outputs,
    input_overlap,
    mask_overlap,
    pattern_changes,
    pattern_dynamics,
    run_changes,
    run_tables,
    statistic_changes,
    statistics_before_after,
    task_grouping,
)
from headsup_lens.sft._study import INCONCLUSIVE

# [1, 0, 0, 0]: Gini = sum|xi - xj| / (2 n^2 mean) = 6 / (2 * 16 * 0.25) = 0.75; mean 1/4, population
# variance 3/16, CV = sqrt(3); Pearson kurtosis = ((3/4)^4 + 3 (1/4)^4) / 4 / (3/16)^2 = 7/3.
ONE_HOT = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
# [1, 1, 0, 0]: Gini = 8 / (2 * 16 * 0.5) = 0.5; CV = 0.5 / 0.5 = 1; kurtosis = (1/2)^4 / (1/4)^2 = 1.
HALF = torch.tensor([[1.0, 0.0], [1.0, 0.0]])


def test_changes_are_after_minus_before():
    changes = pattern_changes({"a": ONE_HOT, "b": HALF}, {"a": HALF, "b": HALF})
    assert torch.equal(changes["a"], torch.tensor([[0.0, 0.0], [1.0, 0.0]])) and not changes["b"].any()
    with pytest.raises(ValueError, match=r"\['c'\] are in only one"):
        pattern_changes({"a": ONE_HOT}, {"a": HALF, "c": HALF})


def test_table1_before_and_after_with_the_mean_row():
    table = statistics_before_after({"a": ONE_HOT, "b": HALF}, {"a": HALF, "b": ONE_HOT}, n_examples=4, seed=1)
    assert list(table.columns) == [
        "task",
        *(f"{k}_before" for k in ("gini", "cv", "kurtosis")),
        *(f"{k}_after" for k in ("gini", "cv", "kurtosis")),
        "n_examples",
        "seed",
    ]
    a, b, mean = (table.iloc[i] for i in range(3))
    assert a.task == "a" and b.task == "b" and mean.task == "mean"
    assert (a.gini_before, a.cv_before, a.kurtosis_before) == pytest.approx((0.75, math.sqrt(3), 7 / 3))
    assert (a.gini_after, a.cv_after, a.kurtosis_after) == pytest.approx((0.5, 1.0, 1.0))
    assert (b.gini_before, b.gini_after) == pytest.approx((0.5, 0.75))
    assert mean.gini_before == pytest.approx(0.625) and mean.kurtosis_after == pytest.approx((1 + 7 / 3) / 2)
    assert (mean.n_examples, mean.seed) == (4, 1)


@pytest.fixture
def result(llama):
    """A run's record: patterns at steps 0, 5, 10 (task "a" moves from ONE_HOT to HALF) and accuracy."""
    middle = (ONE_HOT + HALF) / 2
    patterns = {0: {"a": ONE_HOT, "b": HALF}, 5: {"a": middle, "b": HALF * 2}, 10: {"a": HALF, "b": HALF}}
    accuracy = pd.DataFrame({"step": [0, 0, 10, 10], "task": ["a", "b", "a", "b"], "accuracy": [0.0, 0.1, 0.5, 0.2]})
    history = pd.DataFrame({"step": range(1, 11), "loss": 1.0, "lr": 0.1})
    return FinetuneResult(llama, history, patterns, accuracy)


def test_dynamics_are_the_distance_to_the_final_pattern_per_step(result):
    dynamics = pattern_dynamics(result)
    a = dynamics[dynamics.task == "a"].set_index("step")
    # MSE to the final pattern: step 0 differs from HALF in one of 4 heads by 1; step 5 by 1/2.
    assert a.mse.tolist() == pytest.approx([0.25, 0.0625, 0.0])
    assert a.loc[10, "correlation"] == pytest.approx(1.0)
    # ONE_HOT vs HALF: corr([1,0,0,0], [1,0,1,0]) = (1/4 - 1/8) / (sqrt(3/16) * 1/2) = 1/sqrt(3).
    assert a.loc[0, "correlation"] == pytest.approx(1 / math.sqrt(3))
    assert a.accuracy.tolist()[0] == 0.0 and math.isnan(a.loc[5, "accuracy"]) and a.loc[10, "accuracy"] == 0.5
    b = dynamics[dynamics.task == "b"].set_index("step")
    assert b.loc[5, "mse"] == pytest.approx(0.5)  # 2 HALF vs HALF: two heads off by 1
    assert list(pattern_dynamics(result, ["b"]).task.unique()) == ["b"]


def test_run_tables_and_changes_take_the_first_and_last_step(result):
    changes = run_changes(result)
    assert torch.equal(changes["a"], HALF - ONE_HOT) and not changes["b"].any()
    tables = run_tables(result, n_examples=3, seed=0)
    assert tables["table1"].task.tolist() == ["a", "b", "mean"] and (tables["table1"].n_examples == 3).all()
    assert tables["accuracy"] is result.accuracy
    assert tables["change_correlation"].shape == (2, 2) and len(tables["dynamics"]) == 6


def test_a_composite_change_fitted_from_its_components():
    generator = torch.Generator().manual_seed(0)
    a, b, c, d = (torch.randn(4, 8, generator=generator) for _ in range(4))
    changes = {"o/a": a, "o/b": b, "o/c": c, "o/d": d, "o/a+b": 2 * a + 0.5 * b, "o/c+d": c - d + 0.1 * a}
    fits = composition_fits(changes, [("a", "b"), ("c", "d")], prefix="o/", n_shuffles=200, seed=3)
    first = fits.iloc[0]
    assert first.composite == "o/a+b" and first.r2 == pytest.approx(1.0)
    assert (first.weight_a, first.weight_b) == pytest.approx((2.0, 0.5))
    assert first.shuffled_p == 0.0 and first.shuffled_r2_p95 < 0.5 and first.n_heads == 32 and first.seed == 3
    # The other pairs of basic tasks (c, d only: composites and the components are left out) fit worse.
    assert first.other_pairs_r2_max == first.other_pairs_r2_mean < 0.9
    second = fits.iloc[1]
    assert second.composite == "o/c+d" and 0.9 < second.r2 < 1 and second.weight_c == pytest.approx(1.0, abs=0.1)


def test_grouping_keeps_the_tasks_of_the_matrix():
    names = ["antonym", "synonym", "sentiment"]
    correlation = pd.DataFrame([[1.0, 0.8, 0.1], [0.8, 1.0, 0.2], [0.1, 0.2, 1.0]], index=names, columns=names)
    groups = [("antonym", "synonym"), ("country-capital", "country-currency"), ("sentiment", "ag_news")]
    row = task_grouping(correlation, groups).iloc[0]
    assert row.test == "related tasks" and row.groups == "antonym+synonym | sentiment"
    assert row.within == pytest.approx(0.8) and row["between"] == pytest.approx(0.15) and row.nearest_in_group == 2
    assert row.n_assignments == 6 and row.p_value == pytest.approx(2 / 6)  # 2 of 3! orders give 0.8 within
    # Three tasks, one pair: the best matrix reaches p = 1/3 only, so the test has no power.
    assert row.min_p == pytest.approx(1 / 3) and row.reading == INCONCLUSIVE
    assert task_grouping(correlation.iloc[[0, 2], [0, 2]], groups) is None  # no group has two tasks


def test_mask_overlap_against_the_removed_heads():
    change = torch.tensor([[0.9, -0.8, 0.0], [0.1, 0.0, -0.05]])
    mask = HeadMask.from_heads([(0, 0), (1, 0)], (2, 3))  # removes 2 heads
    table = mask_overlap({"t": change, "other": change}, {"t": mask}).set_index("score")
    assert list(table.task.unique()) == ["t"] and (table.k == 2).all() and (table.n_heads == 6).all()
    # |change|: the top 2 are (0,0) and (0,1): one is removed; increase: (0,0) and (1,0): both.
    assert table.loc["|change|", "overlap"] == 1 and table.loc["increase", "overlap"] == 2
    assert table.loc["increase", "expected"] == pytest.approx(2 * 2 / 6)
    assert table.loc["increase", "p_value"] == pytest.approx(1 / 15)  # C(2,2) / C(6,2)
    assert list(mask_overlap({"t": change}, {}).columns)[:3] == ["task", "score", "k"]
    # Half again the chance overlap (0.67 -> 1 head) has p = 1 - C(4,2)/C(6,2) = 0.6: the test has no power.
    assert table.power_p.tolist() == pytest.approx([0.6] * 2) and set(table.reading) == {INCONCLUSIVE}


def test_an_overlap_counts_only_for_a_mask_that_elicits_its_task():
    change = torch.zeros(6, 6)
    change[0] = 1.0  # layer 0's heads change most
    mask = HeadMask.from_heads([(0, h) for h in range(6)], (6, 6))  # and are the heads the mask removes
    for elicits, reading in ((True, "above chance"), (False, INCONCLUSIVE)):
        row = mask_overlap({"t": change}, {"t": mask}, {"t": elicits}).set_index("score").loc["increase"]
        assert row.overlap == 6 and row.p_value < 1e-5 and row.mask_elicits == elicits and row.reading == reading


def test_an_overlap_at_chance_is_read_only_where_the_test_could_see_more():
    # 270 heads, 74 removed (SmolLM2's antonym mask): chance is 74²/270 ≈ 20.3 heads
    removed = [(h // 9, h % 9) for h in range(74)]
    mask = HeadMask.from_heads(removed, (30, 9))
    change = torch.zeros(30, 9)
    flat = change.view(-1)
    flat[torch.arange(20)] = 1.0  # 20 of the most changed heads are removed ones ...
    flat[torch.arange(100, 154)] = 1.0  # ... and 54 are not
    row = mask_overlap({"t": change}, {"t": mask}, {"t": True}).set_index("score").loc["increase"]
    assert row.overlap == 20 and row.p_value > 0.05 and row.power_p < 0.05 and row.reading == "at chance"


def test_grouping_without_the_tasks_that_share_their_inputs():
    names = ["antonym", "synonym", "country-capital", "country-currency", "sentiment", "ag_news"]
    matrix = pd.DataFrame(0.1, index=names, columns=names)
    for a, b in (("antonym", "synonym"), ("country-capital", "country-currency"), ("sentiment", "ag_news")):
        matrix.loc[a, b] = matrix.loc[b, a] = 0.9
    for n in names:
        matrix.loc[n, n] = 1.0
    overlap = pd.DataFrame(
        [("antonym", "synonym", 600, 0.51), ("country-capital", "country-currency", 197, 1.0), ("sentiment", "ag_news", 0, 0.0)],
        columns=["task_a", "task_b", "shared", "share"],
    )  # fmt: skip
    groups = [names[:2], names[2:4], names[4:]]
    table = task_grouping(matrix, groups, overlap).set_index("test")
    related, apart = table.loc["related tasks"], table.loc["without shared inputs"]
    # three pairs among six tasks: 1 grouping in 15, so even this perfect matrix only reaches p = 1/15
    assert related.p_value == pytest.approx(1 / 15) == related.min_p and related.reading == INCONCLUSIVE
    assert apart.groups == "antonym | synonym | country-capital | country-currency | sentiment+ag_news"
    assert apart.min_p == pytest.approx(1 / 15) and apart.reading == INCONCLUSIVE
    # two pairs among six (1 grouping in 45) can show a grouping, or fail to
    two = [names[:2], names[4:]]
    matrix.loc["country-capital", "country-currency"] = matrix.loc["country-currency", "country-capital"] = 0.1
    assert task_grouping(matrix, two).iloc[0].reading == "grouped"
    flat = pd.DataFrame(0.1, index=names, columns=names) + 0.9 * pd.DataFrame(np.eye(6), index=names, columns=names)
    assert task_grouping(flat, two).iloc[0].reading == "not grouped"


def test_input_overlap_counts_the_inputs_two_tasks_share():
    a = Task.from_pairs("a", [("x", "1"), ("y", "2"), ("z", "3"), ("w", "4")], instruction="{input}", n_eval=1)
    b = Task.from_pairs("b", [("x", "9"), ("y", "8")], instruction="{input}", n_eval=1)
    c = Task.from_pairs("c", [("q", "9"), ("r", "8")], instruction="{input}", n_eval=1)
    table = input_overlap([a, b, c]).set_index(["task_a", "task_b"])
    assert table.loc[("a", "b")].tolist() == [2, 1.0] and table.loc[("a", "c")].tolist() == [0, 0.0]
    assert len(table) == 3


def spread(pattern: torch.Tensor, n: int, noise: float, seed: int) -> torch.Tensor:
    """n example patterns around `pattern` (non-negative): the pattern plus uniform noise in [0, noise)."""
    generator = torch.Generator().manual_seed(seed)
    return pattern.double() + noise * torch.rand(n, *pattern.shape, generator=generator, dtype=torch.float64)


def test_statistic_changes_with_intervals_over_the_examples():
    flat = torch.ones(4, 4)
    peaked = torch.ones(4, 4)
    peaked[0, 0] = 12.0
    before = {"t": spread(flat, 32, 0.2, 0), "u": spread(flat, 32, 0.2, 1)}
    after = {"t": spread(peaked, 32, 0.2, 2), "u": spread(flat, 32, 0.2, 3)}
    table = statistic_changes(before, after, n_resamples=500, seed=0).set_index(["task", "statistic"])
    t = table.loc[("t", "gini")]
    # the change is the statistic of the mean patterns, after minus before
    assert t.change == pytest.approx(gini(after["t"].mean(0)) - gini(before["t"].mean(0)))
    assert t.change_low > 0.3 and t.change_low <= t.change <= t.change_high and t.n_examples == 32
    u = table.loc[("u", "gini")]  # the same pattern before and after, other noise: the interval holds 0
    assert u.change_low < 0 < u.change_high and abs(u.change) < 0.05
    mean = table.loc[("mean", "cv")]
    assert mean.change == pytest.approx((table.loc[("t", "cv")].change + table.loc[("u", "cv")].change) / 2)
    assert mean.change_low > 0 and (table.n_resamples == 500).all()
    with pytest.raises(ValueError, match="only one"):
        statistic_changes(before, {"t": after["t"]})
    with pytest.raises(ValueError, match="same examples"):
        statistic_changes({"t": before["t"]}, {"t": after["t"][:5]})


def test_a_direction_needs_every_seeds_interval_on_one_side():
    rows = [
        {"seed": s, "task": "t", "statistic": "gini", "change": c, "change_low": lo, "change_high": hi}
        for s, (c, lo, hi) in enumerate([(0.2, 0.1, 0.3), (0.15, 0.05, 0.25), (0.1, 0.01, 0.2)])
    ]
    rows += [
        {"seed": s, "task": "u", "statistic": "gini", "change": c, "change_low": lo, "change_high": hi}
        for s, (c, lo, hi) in enumerate([(-0.2, -0.3, -0.1), (-0.01, -0.05, 0.03), (-0.1, -0.2, -0.01)])
    ]
    table = change_consistency(pd.DataFrame(rows)).set_index("task")
    assert table.loc["t", "reading"] == "rises" and table.loc["t", "seeds_above_0"] == 3
    # two seeds say it falls, one interval holds 0: inconclusive, not "falls"
    assert table.loc["u", "reading"] == INCONCLUSIVE and table.loc["u", "seeds_below_0"] == 2
    assert table.loc["u", "change_mean"] == pytest.approx(-0.31 / 3) and table.loc["u", "seeds"] == 3


def test_held_out_outputs_score_every_generation(llama):
    words = ["cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird"]
    task = Task.from_pairs("upper", [(w, w.upper()) for w in words], instruction="Upper: {input}", n_eval=4)
    scores, shown = held_out_outputs(llama, [task], 3, instructed=False)
    assert list(shown.input) == ["tree", "rock", "fish"] and list(shown.answer) == ["TREE", "ROCK", "FISH"]
    assert scores.loc[0, "n"] == 3 and scores.loc[0, "accuracy"] == pytest.approx(shown.correct.mean())
    assert scores.loc[0, "echo"] == shown.echo.sum()


def test_the_two_recipes_of_the_script():
    organism = organism_sft_config(200, 0)
    assert organism == FinetuneConfig(
        steps=200, batch_size=16, lr=1e-3, pattern_steps=(0, 10, 25, 50, 100), pattern_examples=32, checkpoint_every=50
    )
    assert organism_sft_config(30, 1).pattern_steps == (0, 10, 25) and organism_sft_config(30, 1).seed == 1
    smollm2 = smollm2_sft_config(50)
    assert smollm2.method == "lora" and not smollm2.instructed and smollm2.pattern_steps == (0, 5, 10, 20, 50)
    assert (smollm2.batch_size, smollm2.pattern_examples, smollm2.checkpoint_every, smollm2.lr) == (8, 16, 25, 1e-3)


def test_the_base_organism_is_found_where_it_was_trained(tmp_path, llama_dir):
    """A folder that holds a model is taken as it is (nothing trained)."""
    assert base_organism(llama_dir) == llama_dir
    assert load_model(str(llama_dir)).cfg.n_layers == 2
