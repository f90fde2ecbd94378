"""The SFT paper's measurements on a run, on hand-made patterns whose statistics are worked out here."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from headsup_lens.data import Task
from headsup_lens.masks import HeadMask
from headsup_lens.models import load_model
from headsup_lens.reproduce._sft import base_organism, organism_sft_config, smollm2_sft_config
from headsup_lens.sft import (
    FinetuneConfig,
    FinetuneResult,
    composition_fits,
    held_out_outputs,
    mask_overlap,
    pattern_changes,
    pattern_dynamics,
    run_changes,
    run_tables,
    statistics_before_after,
    task_grouping,
)

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
    assert row.groups == "antonym+synonym | sentiment"
    assert row.within == pytest.approx(0.8) and row["between"] == pytest.approx(0.15) and row.nearest_in_group == 2
    assert row.n_assignments == 6 and row.p_value == pytest.approx(2 / 6)  # 2 of 3! orders give 0.8 within
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
