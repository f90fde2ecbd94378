"""`headsup demo` on the shipped organism meets the bar it prints (issue numbers, measured here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from headsup_lens.demo import DemoConfig, run_demo
from headsup_lens.models import builtin_model_dir

needs_weights = pytest.mark.skipif(
    not (builtin_model_dir("organism") / "config.json").is_file(), reason="organism weights not trained"
)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pinned_masks(tmp_path_factory) -> Path:
    """The pinned 300-step masks (tests/pinned/demo/mask_logits) as mask files the demo loads: what the
    demo computes from them (evaluations, generations, sweep ranks) is a forward pass of fixed masks
    and reproduces on any CPU, unlike 300 steps of training (below)."""
    from safetensors.torch import load_file

    from headsup_lens.masks import HeadMask
    from headsup_lens.models import fingerprint, load_model

    from ..pinned import PINNED

    folder = tmp_path_factory.mktemp("pinned_masks")
    model = fingerprint(load_model("organism"))
    for name, logits in load_file(PINNED / "demo" / "mask_logits.safetensors").items():
        HeadMask.from_logits(logits, model=model).save(folder / f"{name}.safetensors")
    return folder


@pytest.fixture(scope="module")
def demo(tmp_path_factory, pinned_masks):
    return run_demo(DemoConfig(out=str(tmp_path_factory.mktemp("demo")), masks=str(pinned_masks), png=False))


@needs_weights
def test_masks_make_the_organism_perform_tasks_without_instruction(demo):
    for row in demo.summary.to_dict("records"):
        assert row["original"] <= 0.05, row
        assert row["masked"] >= 0.90, row
        assert row["random mask"] <= 0.10, row
        assert row["instructed"] >= 0.95, row


@needs_weights
def test_masks_recover_the_planted_pathways(demo):
    for row in demo.summary.to_dict("records"):
        assert row["jaccard vs S_t"] >= 0.5, row  # measured 0.58-0.69 with the fast schedule (README)
        assert row["jaccard vs S_t"] > 5 * row["random expectation"], row


@needs_weights
def test_weight_order_switches_before_random_order(demo):
    weight, random = demo.sweeps["weight order"].switch_step, demo.sweeps["random order"].switch_step
    assert weight is not None
    assert random is None or weight < random


@needs_weights
def test_report_is_written(demo):
    html = (demo.out / "report.html").read_text()
    assert "planted" in html and "Jaccard" in html


@pytest.mark.slow
@needs_weights
def test_readme_install_and_demo_in_a_fresh_virtual_environment(tmp_path):
    """The README's first command in a new venv: it installs what the demo needs and the demo writes
    its report (the demo's time is printed, not bounded: it depends on the machine and its load)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "-e", str(ROOT)], check=True)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(
        [str(venv / "bin" / "headsup"), "demo", "--out", str(tmp_path / "out")],
        check=True,
        env=environment,
        cwd=tmp_path,
    )
    seconds = time.perf_counter() - start
    print(f"headsup demo in a fresh venv: {seconds:.0f} s")
    assert (tmp_path / "out" / "report.html").is_file()


@needs_weights
def test_stored_masks_are_used_instead_of_training(demo, pinned_masks):
    from headsup_lens.masks import HeadMask
    from headsup_lens.training import safe_name

    assert not (demo.out / "training").exists()  # nothing trained
    for row in demo.summary.to_dict("records"):
        stored = HeadMask.load(pinned_masks / f"{safe_name(row['task'])}.safetensors")
        assert row["heads kept"] == stored.n_kept, row


# ---------------------------------------------------------------- pinned results
# The demo's tables and sweep ranks, computed from the pinned 300-step masks, and those masks, stored in
# tests/pinned/demo/: a change that moves code around must leave every one of them equal, ranks, counts
# and texts exactly, floats to tests/pinned's tolerance (HEADSUP_UPDATE_PINNED=1 stores new ones).


@needs_weights
@pytest.mark.parametrize(
    "table",
    [
        "summary",
        "evaluation",
        "sweeps",
        "generations",
        "sweep_weight_order",
        "sweep_influence_order",
        "sweep_random_order",
    ],
)
def test_demo_tables_equal_the_pinned_ones(demo, table):
    from ..pinned import assert_pinned_frame

    frame = pd.read_csv(demo.out / "tables" / f"{table}.csv", keep_default_na=False, na_values=[""])
    assert_pinned_frame(f"demo/{table}", frame)


# Mask logits after the demo's 300 steps, against the pinned ones (trained through the bridge's hook
# points, one thread, AVX-512 kernels). Measured spread of the largest logit difference over the three
# tasks: 0.010 with ATen's AVX2 kernels, 0.021 with the direct forward pass, 0.10 with ATen's kernels
# without SIMD (ATEN_CPU_CAPABILITY=default), where head 72 of the translation mask (pinned logit
# 0.068) ended at -0.027: near the threshold the straight-through step amplifies the last bits. The
# tolerance is that spread with margin; heads farther than it from zero must keep their side.
MASK_ATOL = 0.25


@needs_weights
@pytest.mark.parametrize("direct", [False, True], ids=["hook points", "direct forward pass"])
def test_masks_trained_for_300_steps_keep_the_pinned_heads(direct):
    """The demo's mask training (its tasks, schedule and one thread), through the bridge's hook points
    (`direct_path(False)`, what the pin stores) and through the direct forward pass the demo uses: the
    pinned kept heads, and the pinned logits to `MASK_ATOL`. (Bit for bit only on the CPU that stored
    them: not asserted.)"""
    from headsup_lens.data import load_task
    from headsup_lens.gates import direct_path
    from headsup_lens.models import load_model
    from headsup_lens.training import TrainConfig, safe_name, train_masks

    from ..pinned import assert_pinned_mask_logits

    config = DemoConfig()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = load_model("organism")
        tasks = [load_task(name) for name in config.tasks]
        recipe = TrainConfig.fast(steps=config.steps, batch_size=config.batch_size, seed=config.seed, progress=False)
        with direct_path(direct):
            results = train_masks(model, tasks, recipe)
    finally:
        torch.set_num_threads(threads)
    logits = {safe_name(n): r.mask.logits for n, r in results.items()}
    assert_pinned_mask_logits("demo/mask_logits", logits, atol=MASK_ATOL, store=not direct)
