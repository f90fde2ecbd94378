"""The shipped organism: loadable by name, and its planted pathways meet the bar on held-out words."""

from __future__ import annotations

import pytest

from headsup_lens import load_model
from headsup_lens.models import builtin_model_dir
from headsup_lens.organism import BAR, TASK_NAMES, bar_failures, check_planted, load_planted

SHIPPED = builtin_model_dir("organism")
needs_weights = pytest.mark.skipif(not (SHIPPED / "config.json").is_file(), reason="organism weights not trained")


@pytest.fixture(scope="module")
def organism():
    return load_model("organism", device="cpu")


@needs_weights
def test_shipped_files_are_small_and_complete():
    names = {p.name for p in SHIPPED.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "planted.json"} <= names
    assert sum(p.stat().st_size for p in SHIPPED.iterdir() if p.is_file()) <= 20 * 2**20
    planted = load_planted()
    assert sorted(planted) == sorted(TASK_NAMES)
    heads = [h for s in planted.values() for h in s]
    assert len(heads) == len(set(heads))  # disjoint pathways


@needs_weights
def test_planted_pathways_meet_the_bar(organism):
    assert (organism.cfg.n_layers, organism.cfg.n_heads, organism.cfg.d_head) == (8, 16, 8)
    table = check_planted(organism, n_words=12)
    assert list(table["task"]) == [f"organism/{t}" for t in TASK_NAMES]
    assert bar_failures(table) == [], table.to_string()


@needs_weights
def test_no_words_or_no_tasks_are_refused_before_any_generation(organism, monkeypatch):
    from headsup_lens.organism import _check

    monkeypatch.setattr(_check, "generate_answers", None)  # reached: a TypeError, not the expected message
    with pytest.raises(ValueError, match="n_words must be >= 1, got 0"):
        check_planted(organism, n_words=0)
    with pytest.raises(ValueError, match="tasks is an empty list"):
        check_planted(organism, tasks=[])


def test_bar_failures_name_the_failed_cells():
    import pandas as pd

    good = {"original": 0.0, "planted": 1.0, "random": 0.0, "instructed": 1.0}
    table = pd.DataFrame([{"task": "organism/a", **good}, {"task": "organism/b", **good, "random": 0.5}])
    assert bar_failures(table) == [f"organism/b: random accuracy 0.50 (bar: {BAR['random'][0]} 0.1)"]
