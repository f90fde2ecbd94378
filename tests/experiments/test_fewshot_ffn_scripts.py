"""Table 3 (few-shot and hybrid masks) and Table 40 (heads + FFN masks) scripts end to end, as
subprocesses; their rows are checked against plain library calls on the same masks (the procedure
itself: `tests/reproduce/test_fewshot.py`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ..conftest import build_llama_dir, run_script


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


@pytest.mark.slow  # ~1-2 min: 100 held-out examples x 13 settings per task, three runs
def test_table3_on_the_organism_rows_match_the_library_and_resume(organism_like, tmp_path):
    import headsup_lens as hl
    from headsup_lens.data import fewshot
    from headsup_lens.evaluation import accuracy, answer_loss

    args = ["--model", str(organism_like), "--out", str(tmp_path), "--steps", "4", "--batch-size", "2", "--no-png"]
    args += ["--tasks", "organism/reverse", "--hybrid-tasks", "organism/plural", "organism/uppercase"]
    run_script("table3_fewshot.py", *args)
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "table3_fewshot.csv")
    five = table[table.prompt == "5-shot"].set_index("setting")
    assert not table.seen_by_hybrid.any()  # reverse is not in the mixture
    hybrid_name = "fewshot/hybrid_plural+uppercase"
    assert five.loc["hybrid mask", "mask_task"] == hybrid_name
    model = hl.load_model(str(organism_like))
    task = hl.load_task("organism/reverse")
    shot = fewshot(task)
    hybrid = cached_mask(out, hybrid_name, model)
    assert five.loc["original", "answer_nll"] == pytest.approx(answer_loss(model, shot), rel=1e-4)
    assert five.loc["hybrid mask", "accuracy"] == accuracy(model, shot, mask=hybrid)
    summary = pd.read_csv(out / "table3_summary.csv")
    assert summary.loc[0, "5-shot hybrid mask (accuracy)"] == five.loc["hybrid mask", "accuracy"]
    assert (out / "times.csv").is_file()

    printed = run_script("table3_fewshot.py", *args).stdout  # a second run finds the masks and the rows
    assert "training" not in printed and "rows found" in printed
    assert pd.read_csv(out / "table3_fewshot.csv").equals(table)
    # Another task with the same hybrid mask, in a separate invocation: one table holds both.
    printed = run_script(
        "table3_fewshot.py", *[a if a != "organism/reverse" else "organism/antonym" for a in args]
    ).stdout
    assert "training value-gate masks for fewshot/organism/antonym (4 steps)" in printed
    both = pd.read_csv(out / "table3_fewshot.csv")
    assert list(both.task.unique()) == ["organism/antonym", "organism/reverse"]
    assert both[both.task == "organism/reverse"].reset_index(drop=True).equals(table)
    assert list(pd.read_csv(out / "table3_summary.csv").task) == ["organism/antonym", "organism/reverse"]


@pytest.mark.slow  # two mask trainings and two evaluations of 100 examples x 13 settings
def test_table40_counts_the_ffn_blocks_its_masks_remove(organism_like, tmp_path):
    import headsup_lens as hl
    from headsup_lens.evaluation import answer_loss

    args = ["--model", str(organism_like), "--out", str(tmp_path), "--steps", "30", "--batch-size", "2", "--no-png"]
    run_script("table40_ffn_mask.py", *args, "--tasks", "organism/reverse")
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
    blocks = pd.read_csv(out / "table40_ffn_blocks.csv").set_index("mask")
    removed = len(ffn.removed_mlp_layers())
    assert blocks.loc["heads + FFN", "ffn removed"] == rows.loc["heads + FFN", "ffn_removed"] == removed
    assert blocks.loc["heads", "ffn removed"] == 0
    # The FFN slots act in evaluation: the row's loss is the library's loss under the full mask.
    assert rows.loc["heads + FFN", "answer_nll"] == pytest.approx(answer_loss(model, task, mask=ffn), rel=1e-4)
    assert rows.loc["heads", "answer_nll"] == pytest.approx(answer_loss(model, task, mask=heads), rel=1e-4)
