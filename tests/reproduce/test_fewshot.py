"""Table 3's procedure: few-shot and hybrid rows against plain library calls, parts kept and combined."""

from __future__ import annotations

import json
import os
import time

import pandas as pd
import pytest

from headsup_lens import load_model
from headsup_lens.data import Task, fewshot
from headsup_lens.evaluation import accuracy, answer_loss
from headsup_lens.masks import HeadMask
from headsup_lens.reproduce._fewshot import (
    fewshot_hybrid_task,
    fewshot_rows,
    fewshot_summary,
    fewshot_task_names,
    load_parts,
    part_stem,
    rows_key,
    save_part,
)

from ..conftest import build_llama_dir

LLAMA_USER = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
LLAMA_ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
WORDS = ["cat", "dog", "sun", "map", "pen", "cup", "hat", "box", "bag", "egg", "fox", "jam", "owl", "ant"]


def tiny(name: str, answer=lambda w: w[::-1]) -> Task:
    return Task(name, tuple((w, answer(w)) for w in WORDS), instruction="Do it: {input}", n_eval=4)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(str(build_llama_dir(tmp_path_factory.mktemp("model"))))


@pytest.fixture(scope="module")
def rows(model):
    task = tiny("tiny/reverse")
    shot = fewshot(task, k=2, dev=2)
    mask = HeadMask.from_heads([(0, 1), (1, 3)], model)
    hybrid = HeadMask.from_heads([(0, 2)], model)
    table, generations = fewshot_rows(
        model, task, shot, mask, hybrid, hybrid_name="fewshot/hybrid_x", seen=False, shots=2, batch_size=8
    )
    return task, shot, mask, hybrid, table, generations


def test_rows_match_the_library_on_the_same_masks(model, rows):
    task, shot, mask, hybrid, table, generations = rows
    assert list(table.columns[:2]) == ["task", "prompt"] and set(table.task) == {"tiny/reverse"}
    two, zero = (
        table[table.prompt == "2-shot"].set_index("setting"),
        table[table.prompt == "0-shot"].set_index("setting"),
    )
    assert {"original", "instructed", "masked", "random mask", "hybrid mask", "echo baseline"} <= set(two.index)
    assert "hybrid mask" not in zero.index and {"original", "instructed", "masked"} <= set(zero.index)
    assert two.loc["hybrid mask", "mask_task"] == "fewshot/hybrid_x" and not table.seen_by_hybrid.any()
    assert two.loc["original", "answer_nll"] == pytest.approx(answer_loss(model, shot), rel=1e-4)
    assert zero.loc["original", "answer_nll"] == pytest.approx(answer_loss(model, task), rel=1e-4)
    assert zero.loc["masked", "answer_nll"] == pytest.approx(answer_loss(model, task, mask=mask), rel=1e-4)
    assert two.loc["hybrid mask", "n_kept"] == hybrid.n_kept
    assert two.loc["hybrid mask", "accuracy"] == accuracy(model, shot, mask=hybrid)
    hybrid_rows = generations[(generations.prompt == "2-shot") & (generations.setting == "hybrid mask")]
    assert len(hybrid_rows) == task.n_eval and set(generations.task) == {"tiny/reverse"}


def test_parts_are_kept_and_combined_newest_first_tasks_first(model, rows, tmp_path):
    task, _, mask, hybrid, table, generations = rows
    shared = rows_key(model, [hybrid], [2, 0.25, 0])
    assert rows_key(model, [hybrid], [2, 0.25, 1]) != shared and rows_key(model, [mask], [2, 0.25, 0]) != shared
    other = table.assign(task="tiny/other")
    save_part(
        tmp_path,
        part_stem(tiny("tiny/other"), "k", shared),
        other,
        generations.assign(task="tiny/other"),
    )
    stale = save_part(tmp_path, part_stem(task, "old", shared), table.assign(accuracy=-1.0), generations)
    os.utime(stale, (time.time() - 60, time.time() - 60))
    save_part(tmp_path, part_stem(task, rows_key(model, [mask]), shared), table, generations)
    save_part(tmp_path, part_stem(task, "x", "another"), table, generations)  # another hybrid: not combined
    combined, texts = load_parts(tmp_path, shared, ["tiny/reverse"])
    assert list(dict.fromkeys(combined.task)) == ["tiny/reverse", "tiny/other"] and len(combined) == 2 * len(table)
    assert (combined[combined.task == "tiny/reverse"].accuracy >= 0).all()  # the newest part of the task
    assert len(texts) == 2 * len(generations)
    with pytest.raises(ValueError, match="no rows kept for"):
        load_parts(tmp_path, shared, ["tiny/missing"])
    summary = fewshot_summary(combined, hybrid=hybrid, hybrid_name="fewshot/hybrid_x")
    assert summary.task.tolist() == ["tiny/reverse", "tiny/other"]
    reverse = summary.set_index("task").loc["tiny/reverse"]
    two = table[(table.prompt == "2-shot")].set_index("setting")
    assert reverse["2-shot hybrid mask (accuracy)"] == two.loc["hybrid mask", "accuracy"]
    assert reverse["heads_kept_5shot"] == two.loc["masked", "n_kept"] and reverse["heads_kept_hybrid"] == hybrid.n_kept
    assert not reverse["seen_by_hybrid"]


def test_hybrid_mixtures_and_the_shared_hybrid_file(tmp_path):
    data = tmp_path / "data"
    pairs = [{"input": w, "output": w[::-1]} for w in WORDS * 16]
    for folder in ("abstractive", "fewshot"):
        for name in ("antonym", "sentiment"):
            path = data / "function_vectors" / folder / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(pairs), encoding="utf-8")
    rows = [{"input": f"a{LLAMA_ASSISTANT}A{LLAMA_USER}b{LLAMA_ASSISTANT}B{LLAMA_USER}c", "output": "C"}] * 8
    (data / "function_vectors" / "fewshot" / "hybrid.json").write_text(json.dumps(rows), encoding="utf-8")
    assert fewshot_task_names(data) == ["antonym", "sentiment"]
    tasks = [tiny("antonym"), tiny("sentiment")]
    hybrid, seen = fewshot_hybrid_task(tasks, None, data_dir=data)
    assert hybrid.name == "fewshot/hybrid" and seen == {"antonym": True, "sentiment": False}  # sentiment: unseen
    mixed, seen = fewshot_hybrid_task(tasks, ["organism/plural", "organism/reverse"], shots=3)
    assert mixed.name == "fewshot/hybrid_plural+reverse" and seen == {"antonym": False, "sentiment": False}
    assert len(mixed.demonstrations(0)) == 3
    with pytest.raises(ValueError, match="no few-shot files"):
        fewshot_task_names(tmp_path)


def test_summary_of_a_table_with_one_task(rows):
    _, _, _, hybrid, table, _ = rows
    summary = fewshot_summary(table, hybrid=hybrid, hybrid_name="h")
    assert len(summary) == 1 and summary.hybrid.iloc[0] == "h"
    assert {"0-shot original (accuracy)", "2-shot masked (strict)"} <= set(summary.columns)
    assert isinstance(summary, pd.DataFrame)
