"""Table 3 (few-shot and hybrid masks) and Table 40 (heads + FFN masks) scripts on tiny models: their rows
are checked against plain library calls on the same masks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from ..conftest import build_llama_dir

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
LLAMA_USER = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
LLAMA_ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


@pytest.fixture(scope="module")
def scripts():
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import table3_fewshot
        import table40_ffn_mask

        yield {"table3": table3_fewshot, "table40": table40_ffn_mask}
    finally:
        sys.path.remove(str(EXPERIMENTS))


@pytest.fixture(scope="module")
def organism_like(tmp_path_factory):
    """A tiny Llama with planted sets beside its weights, as the organism ships them."""
    from headsup_lens.organism import TASK_NAMES, plant_head_sets, save_planted

    path = build_llama_dir(tmp_path_factory.mktemp("organism_like"))
    save_planted(path, plant_head_sets(TASK_NAMES, 2, 8, 1, seed=0), 2, 8)
    return path


def cached_mask(out: Path, task: str, model):
    from headsup_lens.masks import HeadMask
    from headsup_lens.training import safe_name

    paths = sorted(out.glob(f"masks/*/*/masks/{safe_name(task)}.safetensors"))
    assert len(paths) == 1, paths
    return HeadMask.load(paths[0], model)


@pytest.mark.slow  # ~40-60 s: 100 held-out examples x 13 settings per task
def test_table3_on_the_organism_rows_match_the_library_and_resume(scripts, organism_like, tmp_path, capsys):
    import headsup_lens as hl
    from headsup_lens.data import fewshot
    from headsup_lens.evaluation import accuracy, answer_loss

    args = [
        "--model",
        str(organism_like),
        "--out",
        str(tmp_path),
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--no-png",
        "--threads",
        "1",
        "--tasks",
        "organism/reverse",
        "--hybrid-tasks",
        "organism/plural",
        "organism/uppercase",
    ]
    scripts["table3"].main(args)
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "table3_fewshot.csv")
    five = table[table.prompt == "5-shot"].set_index("setting")
    zero = table[table.prompt == "0-shot"].set_index("setting")
    assert {"original", "instructed", "masked", "random mask", "hybrid mask", "echo baseline"} <= set(five.index)
    assert "hybrid mask" not in zero.index and {"original", "instructed", "masked"} <= set(zero.index)
    assert {"strict", "accuracy_low", "echo", "p_vs_original"} <= set(table.columns)
    assert not table.seen_by_hybrid.any()  # reverse is not in the mixture
    hybrid_name = "fewshot/hybrid_plural+uppercase"
    assert (
        five.loc["hybrid mask", "mask_task"] == hybrid_name
        and five.loc["masked", "mask_task"] == "fewshot/organism/reverse"
    )

    # The same numbers from plain library calls on the cached masks.
    model = hl.load_model(str(organism_like))
    task = hl.load_task("organism/reverse")
    shot = fewshot(task)
    mask, hybrid = cached_mask(out, shot.name, model), cached_mask(out, hybrid_name, model)
    assert five.loc["original", "answer_nll"] == pytest.approx(answer_loss(model, shot), rel=1e-4)
    assert zero.loc["original", "answer_nll"] == pytest.approx(answer_loss(model, task), rel=1e-4)
    assert five.loc["hybrid mask", "n_kept"] == hybrid.n_kept
    assert five.loc["hybrid mask", "accuracy"] == accuracy(model, shot, mask=hybrid)
    assert zero.loc["masked", "answer_nll"] == pytest.approx(answer_loss(model, task, mask=mask), rel=1e-4)
    generations = pd.read_csv(out / "table3_generations.csv")
    assert len(generations[(generations.prompt == "5-shot") & (generations.setting == "hybrid mask")]) == task.n_eval
    summary = pd.read_csv(out / "table3_summary.csv")
    assert summary.loc[0, "5-shot hybrid mask (accuracy)"] == five.loc["hybrid mask", "accuracy"]
    assert (out / "times.csv").is_file()

    capsys.readouterr()
    scripts["table3"].main(args)  # a second run finds the masks and every task's rows
    printed = capsys.readouterr().out
    assert "training" not in printed and "rows found" in printed
    assert pd.read_csv(out / "table3_fewshot.csv").equals(table)
    # Another task with the same hybrid mask, in a separate invocation: one table holds both.
    scripts["table3"].main([a if a != "organism/reverse" else "organism/antonym" for a in args])
    printed = capsys.readouterr().out
    assert "training value-gate masks for fewshot/organism/antonym (4 steps)" in printed
    both = pd.read_csv(out / "table3_fewshot.csv")
    assert list(both.task.unique()) == ["organism/antonym", "organism/reverse"]
    assert both[both.task == "organism/reverse"].reset_index(drop=True).equals(table)
    assert list(pd.read_csv(out / "table3_summary.csv").task) == ["organism/antonym", "organism/reverse"]


@pytest.mark.slow  # ~40-60 s: 100 held-out examples x 13 settings per task
def test_table3_uses_the_shared_hybrid_file_and_marks_unseen_tasks(scripts, tmp_path):
    data = tmp_path / "data"
    word = lambda i: "".join("abcdefghijklmnopqrstuvwxyz"[int(d)] for d in str(i))  # noqa: E731 - letters only
    for name in ("antonym", "sentiment"):
        answer = (lambda i: f"o{word(i)}") if name == "antonym" else (lambda i: "positive" if i % 2 else "negative")
        pairs = [{"input": f"w{word(i)}", "output": answer(i)} for i in range(210)]
        for folder in ("abstractive", "fewshot"):  # a few-shot file marks a task of Table 3
            path = data / "function_vectors" / folder / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(pairs), encoding="utf-8")
    rows = [
        {"input": f"a{word(i)}{LLAMA_ASSISTANT}A{LLAMA_USER}b{LLAMA_ASSISTANT}B{LLAMA_USER}c{word(i)}", "output": "C"}
        for i in range(8)
    ]
    (data / "function_vectors" / "fewshot" / "hybrid.json").write_text(json.dumps(rows), encoding="utf-8")
    model_dir = build_llama_dir(tmp_path / "model")
    scripts["table3"].main(
        [
            "--model",
            str(model_dir),
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "out"),
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--no-png",
            "--threads",
            "1",
            "--shots",
            "2",
        ]
    )
    table = pd.read_csv(tmp_path / "out" / "model" / "table3_fewshot.csv")
    assert sorted(table.task.unique()) == ["antonym", "sentiment"]
    seen = table.groupby("task").seen_by_hybrid.first()
    assert seen["antonym"] and not seen["sentiment"]  # sentiment is one of HYBRID_UNSEEN
    assert set(table[table.setting == "hybrid mask"].mask_task) == {"fewshot/hybrid"}
    assert "majority label" in set(table[table.task == "sentiment"].setting)


def test_table40_counts_the_ffn_blocks_its_masks_remove(scripts, organism_like, tmp_path):
    import headsup_lens as hl
    from headsup_lens.evaluation import answer_loss

    scripts["table40"].main(
        [
            "--model",
            str(organism_like),
            "--out",
            str(tmp_path),
            "--steps",
            "30",
            "--batch-size",
            "2",
            "--no-png",
            "--threads",
            "1",
            "--tasks",
            "organism/reverse",
        ]
    )
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "table40_ffn_mask.csv")
    assert (table.setting == "original").sum() == 1  # the mask-free rows once
    rows = table[table.setting == "masked"].set_index("mask")
    assert set(rows.index) == {"heads", "heads + FFN"}
    model = hl.load_model(str(organism_like))
    task = hl.load_task("organism/reverse")
    masks = [hl.HeadMask.load(p, model) for p in out.glob("masks/*/*/masks/*.safetensors")]
    assert len(masks) == 2  # one cache folder per recipe: heads only and heads + FFN
    heads = next(m for m in masks if m.mlp_values is None)
    ffn = next(m for m in masks if m.mlp_values is not None)
    removed = int((ffn.mlp_values < 0.5).sum())
    blocks = pd.read_csv(out / "table40_ffn_blocks.csv").set_index("mask")
    assert blocks.loc["heads + FFN", "ffn removed"] == rows.loc["heads + FFN", "ffn_removed"] == removed
    assert blocks.loc["heads", "ffn removed"] == 0
    # The FFN slots act in evaluation: the row's loss is the library's loss under the full mask.
    assert rows.loc["heads + FFN", "answer_nll"] == pytest.approx(answer_loss(model, task, mask=ffn), rel=1e-4)
    assert rows.loc["heads", "answer_nll"] == pytest.approx(answer_loss(model, task, mask=heads), rel=1e-4)
