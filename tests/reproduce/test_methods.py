"""Head-finding methods on several tasks: resumable per task, rankings-only table, AUROC table."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from headsup_lens import load_model, load_task
from headsup_lens.analysis import HeadScores
from headsup_lens.reproduce._methods import auroc_table, compare_methods_on_tasks, learned_rankings, ranking_table
from headsup_lens.training import TrainConfig

METHODS = ["learned_mask", "random", "attribution_patching"]


def test_auroc_table_pivots_by_method_and_task_best_first():
    table = pd.DataFrame(
        {
            "task": ["organism/reverse", "organism/plural", "organism/reverse", "organism/plural", "antonym"],
            "method": ["random", "random", "learned_mask", "learned_mask", "random"],
            "auroc": [0.5, 0.4, 0.9, 1.0, float("nan")],
        }
    )
    aurocs = auroc_table(table)
    assert list(aurocs.index) == ["learned_mask", "random"] and list(aurocs.columns) == [
        "antonym",
        "plural",
        "reverse",
        "mean",
    ]
    assert aurocs.loc["learned_mask", "mean"] == pytest.approx(0.95) and aurocs.loc["random", "mean"] == pytest.approx(
        0.45
    )
    assert math.isnan(aurocs.loc["learned_mask", "antonym"])
    with pytest.raises(ValueError, match="no column"):
        auroc_table(table.drop(columns="auroc"))


def test_methods_on_tasks_resume_and_rank_only(tmp_path, capsys):
    model = load_model("organism")
    tasks = [load_task("organism/reverse"), load_task("organism/plural")]
    settings = dict(k_max=2, k_step=1, n_eval=2, n_examples=2, log=False)
    learned = {"config": TrainConfig.fast(steps=3, batch_size=2)}
    first = compare_methods_on_tasks(model, tasks, METHODS, tmp_path, learned=learned, **settings)
    assert set(first.comparisons) == {"organism/reverse", "organism/plural"}
    assert len(first.summary) == 6 and (first.summary.seconds > 0).all() and first.summary.auroc.between(0, 1).all()
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/*")}
    assert len(stamps) == 2 * 5  # three rankings, curves and summary per task
    reverse = HeadScores.load(tmp_path / "organism__reverse" / "learned_mask.json")
    assert reverse.settings["source"] == "trained" and reverse.settings["tasks_together"] == 2
    again = compare_methods_on_tasks(model, tasks, METHODS, tmp_path, learned=learned, **settings)
    assert again.comparisons == {} and stamps == {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/*")}
    pd.testing.assert_frame_equal(
        again.summary,
        pd.concat([pd.read_csv(p) for p in sorted(tmp_path.glob("*/summary.csv"), reverse=True)], ignore_index=True),
    )
    table = ranking_table(model, tasks, ["learned_mask", "random", "gate_gradient"], tmp_path, n_examples=2, log=False)
    assert set(table.method) == {"learned_mask", "random", "gate_gradient"} and len(table) == 6
    assert table.auroc.between(0, 1).all() and (tmp_path / "organism__plural" / "gate_gradient.json").is_file()


def test_stored_masks_are_named_when_missing(tmp_path):
    model = load_model("organism")
    with pytest.raises(ValueError, match="masks_dir .*: no stored mask"):
        learned_rankings(model, [load_task("organism/reverse")], masks_dir=tmp_path)
