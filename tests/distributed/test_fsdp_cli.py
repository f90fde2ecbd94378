"""`torchrun ... -m headsup_lens train|evaluate|sweep --shard fsdp` on gloo ranks (CPU processes): a
rank killed at a known training step ends the job with one error line and nothing half-written, and
the run resumes from its folder with another number of ranks (3, or one plain process) to the mask
of an uninterrupted run; evaluate and sweep over ranks write what one process writes.

The mask tolerance is `test_fsdp.train_tolerance`'s (the rounding of the gradient over the steps)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import pandas as pd
import pytest
import torch

from headsup_lens import load_model
from headsup_lens.data import load_task
from headsup_lens.masks import HeadMask
from headsup_lens.training import TrainConfig, TrainingAdvice, load_state, train_mask

from ..conftest import REPOSITORY
from .test_fsdp import train_tolerance

STEPS, EVERY, BATCH, STOP = 8, 2, 4, 5
TRAIN = ["train", "--task", "organism/reverse", "--preset", "fast", "--steps", str(STEPS)]
TRAIN += ["--checkpoint-every", str(EVERY), "--batch-size", str(BATCH), "--no-progress"]


def launch(ranks: int | None, *args: str, script: str | None = None, env: dict | None = None):
    """`headsup ARGS` under `torchrun --nproc-per-node RANKS --standalone` (None: one plain process)."""
    run = [str(REPOSITORY / "tests" / "distributed" / script)] if script else ["-m", "headsup_lens"]
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks else []
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, *torchrun, *run, *args],
        capture_output=True,
        text=True,
        env={**environment, **(env or {})},
        cwd=REPOSITORY,
    )


def uninterrupted_mask() -> torch.Tensor:
    config = TrainConfig.fast(steps=STEPS, batch_size=BATCH, checkpoint_every=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingAdvice)
        return train_mask(load_model("organism", device="cpu"), load_task("organism/reverse"), config).mask.logits


@pytest.mark.slow  # three torchrun jobs: a few minutes on a loaded 2-core CPU
def test_a_killed_rank_ends_the_job_and_the_run_resumes_with_other_rank_counts(tmp_path):
    out = tmp_path / "run"
    killed = launch(
        2,
        *TRAIN,
        "--out",
        str(out),
        "--shard",
        "fsdp",
        script="stop_rank.py",
        env={"STOP_STEP": str(STOP), "STOP_RANK": "1"},
    )
    assert killed.returncode != 0
    lines = [line for line in killed.stderr.splitlines() if line.startswith("headsup train")]
    assert len(lines) == 1 and "another rank of the torchrun job stopped" in lines[0], killed.stderr[-3000:]
    # Nothing half-written: no final files, no temporary file, every checkpoint readable.
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".headsup")) == ["checkpoints"]
    assert not list(out.rglob("*.tmp"))
    done = load_state(out / "checkpoints" / "state.pt")["step"]
    assert done == STOP - STOP % EVERY  # the last checkpoint before the rank was lost
    alone = tmp_path / "alone"  # the same interrupted run, resumed by one plain process
    shutil.copytree(out / "checkpoints", alone / "checkpoints")

    expected = uninterrupted_mask()
    config = dict(steps=STEPS, lr=TrainConfig.fast().lr, batch_size=BATCH)
    tolerance = train_tolerance(load_model("organism", device="cpu"), config, [load_task("organism/reverse")])
    for ranks, folder, shard in ((3, out, ["--shard", "fsdp"]), (None, alone, [])):
        resumed = launch(ranks, *TRAIN, "--out", str(folder), *shard)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"resuming from the checkpoint of step {done}" in resumed.stdout
        mask = HeadMask.load(folder / "mask.safetensors")
        assert torch.allclose(mask.logits, expected, atol=tolerance, rtol=0), (
            ranks,
            (mask.logits - expected).abs().max(),
        )


@pytest.mark.slow  # four command runs, two of them torchrun jobs of 3 ranks
def test_evaluate_and_sweep_over_ranks_write_what_one_process_writes(tmp_path):
    config = TrainConfig.fast(steps=20, checkpoint_every=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingAdvice)
        mask = train_mask(load_model("organism", device="cpu"), load_task("organism/reverse"), config).mask
    mask.save(tmp_path / "mask.safetensors")
    evaluate = ["evaluate", "--task", "organism/reverse", "--mask", str(tmp_path / "mask.safetensors")]
    evaluate += ["--no-progress", "--max-new-tokens", "6"]
    sweep = ["sweep", "--prompt", "farm", "--target", "mraf", "--mask", str(tmp_path / "mask.safetensors")]
    sweep += ["--no-png", "--no-progress", "--max-new-tokens", "5", "--batch-size", "8"]
    for ranks, name, shard in ((3, "ranks", ["--shard", "fsdp"]), (None, "one", [])):
        for command in (evaluate, sweep):
            done = launch(ranks, *command, "--out", str(tmp_path / name / command[0]), *shard)
            assert done.returncode == 0, done.stderr[-3000:]
    for path in ("evaluate/results.csv", "evaluate/generations.csv", "sweep/ranks.csv", "sweep/generations.csv"):
        split, single = pd.read_csv(tmp_path / "ranks" / path), pd.read_csv(tmp_path / "one" / path)
        numeric = split.select_dtypes("number").columns
        assert split.drop(columns=numeric).equals(single.drop(columns=numeric)), path
        assert split[numeric].to_numpy() == pytest.approx(single[numeric].to_numpy(), rel=1e-5, nan_ok=True), path
    assert sorted(p.name for p in (tmp_path / "ranks" / "sweep").iterdir()) == sorted(
        p.name for p in (tmp_path / "one" / "sweep").iterdir()
    )


def test_a_truncated_checkpoint_under_fsdp_is_one_line_from_rank_0(tmp_path):
    """`model.safetensors` cut short (a broken copy): one error line naming the file, from rank 0 alone,
    before any weight is placed; no SafetensorError traceback from every rank."""
    from ..conftest import build_llama_dir

    model_dir = build_llama_dir(tmp_path / "model", num_hidden_layers=2)
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    done = launch(2, *TRAIN, "--model", str(model_dir), "--out", str(tmp_path / "run"), "--shard", "fsdp")
    assert done.returncode != 0, done.stderr[-3000:]  # torchrun's own code for a failed job (the ranks exit 2)
    assert "exitcode  : 2" in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("headsup train")]
    assert len(lines) == 1 and f"checkpoint file '{weights}' is truncated" in lines[0], done.stderr[-3000:]
    # The one traceback is torchrun's own report that a rank failed (ChildFailedError), none is a rank's.
    assert done.stderr.count("Traceback") == 1 and "ChildFailedError" in done.stderr, done.stderr[-3000:]
    assert "SafetensorError" not in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
