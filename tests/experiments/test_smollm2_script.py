"""experiments/smollm2.py runs its three stages end to end on a tiny random model with tiny settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from ..conftest import build_llama_dir

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
TASKS = ["organism/antonym", "organism/reverse"]


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import smollm2

        yield smollm2
    finally:
        sys.path.remove(str(EXPERIMENTS))


def test_select_train_analyze_from_stored_masks(script, tmp_path):
    model = str(build_llama_dir(tmp_path / "model"))
    out, runs = tmp_path / "figures", tmp_path / "runs"
    common = ["--model", model, "--out", str(out), "--runs", str(runs), "--no-png", "--eval-batch-size", "8"]

    script.main(["select", "--tasks", *TASKS, *common])
    selection = pd.read_csv(out / "task_selection.csv")
    assert sorted(selection.task) == sorted(TASKS)
    assert {"instructed", "uninstructed", "n_examples"} <= set(selection.columns)
    assert (out / "task_selection.md").read_text().count("\n") == 2 + len(TASKS)

    train = ["--steps", "3", "--batch-size", "2"]
    script.main(["train", "--tasks", *TASKS, *train, *common])
    script.main(["train", "--tasks", TASKS[0], "--seed", "1", *train, *common])
    stored = sorted(p.name for p in (out / "masks").glob("*.safetensors"))
    assert stored == [
        "organism__antonym.safetensors",
        "organism__antonym_seed1.safetensors",
        "organism__reverse.safetensors",
    ]
    assert not list(out.glob("masks/**/checkpoints"))  # run folders with checkpoints stay under --runs

    # One task per run (as separate processes would), then the combined tables cover both.
    script.main(["analyze", "--tasks", TASKS[0], "--new-tokens", "2", *common])
    assert set(pd.read_csv(out / "tables12_evaluation.csv").task) == {TASKS[0]}
    script.main(["analyze", "--tasks", TASKS[1], "--new-tokens", "2", *common])
    table = pd.read_csv(out / "tables12_evaluation.csv")
    assert list(table.task.unique()) == TASKS
    assert pd.read_csv(out / "tables12_evaluation_organism__reverse.csv").task.unique().tolist() == [TASKS[1]]
    assert {
        "original",
        "instructed",
        "masked",
        "random mask",
        "instructed + scaled mask",
        "masked, seed 1",
        "random mask, seed 1",
    } <= set(table.setting)
    assert "other model's mask" not in set(table.setting)
    assert (table.n_examples > 0).all()
    summary = pd.read_csv(out / "fig2_summary.csv")
    assert sorted(summary.order.unique()) == ["random", "weight"]
    assert len(pd.read_csv(out / "table5_jaccard.csv")) == 3  # three stored masks: three pairs
    assert sorted(pd.read_csv(out / "fig6_alpha_grid.csv").alpha.unique().round(1)) == [i / 10 for i in range(11)]
    for stem in (
        "fig2_removal_ranks_weight_organism__antonym",
        "fig4_similarity_organism__reverse",
        "table41_logit_lens_organism__antonym",
        "fig6_alpha_grid_organism__reverse",
        "table5_jaccard",
        "masks",
    ):
        assert (out / f"{stem}.html").is_file(), stem
    stages = set(pd.read_csv(out / "times.csv").stage)
    assert stages == {"select", "train", "analyze"}

    # A second seed trained after the table exists: `evaluate` appends only its rows, reference rows untouched,
    # and the appended rows equal what a full evaluation of that seed's mask gives.
    before = pd.read_csv(out / "tables12_evaluation_organism__reverse.csv")
    script.main(["train", "--tasks", TASKS[1], "--seed", "1", *train, *common])
    script.main(["evaluate", "--tasks", TASKS[1], *common])
    after = pd.read_csv(out / "tables12_evaluation_organism__reverse.csv")
    assert list(after.setting) == [
        *before.setting[:-1],
        "masked, seed 1",
        "random mask, seed 1",
        before.setting.iloc[-1],
    ]
    pd.testing.assert_frame_equal(after[after.setting.isin(before.setting)].reset_index(drop=True), before)
    import headsup_lens as hl

    model_ = hl.load_model(model)
    full = hl.evaluate(
        model_,
        hl.load_task(TASKS[1]),
        hl.HeadMask.load(out / "masks" / "organism__reverse_seed1.safetensors", model_),
        hl.EvalConfig(batch_size=8, random_seed=0),
    ).table
    for setting in ("masked", "random mask"):
        mine, ref = after[after.setting == f"{setting}, seed 1"].iloc[0], full[full.setting == setting].iloc[0]
        for column in ("accuracy", "strict", "answer_nll", "echo", "p_vs_original", "p_vs_instructed"):
            assert mine[column] == pytest.approx(ref[column], rel=1e-5, nan_ok=True), (setting, column)
    texts = pd.read_csv(out / "tables12_generations_organism__reverse.csv", keep_default_na=False)
    assert (texts.setting == "masked, seed 1").sum() == int(mine.n_examples)

    # Masks that other scripts keep beside the seed-0 ones (`_negative`, `_query`, `_mlp`: same task in their
    # metadata) are not seed-0 masks: the combined table still has each task once.
    import shutil

    shutil.copy(
        out / "masks" / "organism__antonym.safetensors", out / "masks" / "organism__antonym_negative.safetensors"
    )
    script.main(["combine", *common])
    table = pd.read_csv(out / "tables12_evaluation.csv")
    assert list(table.task.unique()) == TASKS and not table.duplicated(["task", "setting"]).any()
