"""The benchmarks run end to end on tiny models on the CPU (as subprocesses, the way they are used;
the same scripts run on a GPU at real shapes) and check what they claim: every section and its
table, equal results to plain transformers in fp32 and to the sequential reference, few host
synchronisations per decoding pass, and memory that activation checkpointing lowers. Their timings
are not tested."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ..conftest import build_llama_dir, run_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "experiments" / "bench"


def test_performance_benchmark_checks_its_loops_against_plain_transformers(tmp_path):
    model = build_llama_dir(tmp_path / "model", num_hidden_layers=3)
    done = run_script(
        "bench/performance.py",
        *("--models", str(model), "--calls", "2", "--threads", "1", "--sweep-steps", "6", "--new-tokens", "3"),
        *("--task", "reverse", "--eval-examples", "6", "--eval-new-tokens", "3", "--versus", "plain-eager"),
        *("--versus", "library-bridge", "--out", str(tmp_path / "out")),
    )
    table = pd.read_csv(tmp_path / "out" / "performance.csv")
    assert sorted(set(table.section)) == ["eval", "sweep", "train"]
    assert set(table.versus) == {"plain-eager", "library-bridge"}
    assert table.identical.all() and np.isfinite(table.ratio_wall).all() and (table.calls == 2).all()
    assert "equal to the sequential reference (3 steps): True" in done.stdout


def test_performance_runs_every_section_and_writes_its_table(tmp_path):
    """Every loop that compiles nothing (the compiled ones run in the GPU script's dry run below), each
    timed over its synchronised calls, its first call apart; the ratio of medians lies within the
    spread of the middle halves."""
    loops = ["plain-captured", "plain-eager", "library-eager-steps", "library-eager-train", "library-packed-train"]
    run_script(
        "bench/performance.py",
        *("--models", "tiny", "--device", "cpu", "--calls", "3", "--sweep-steps", "3", "--new-tokens", "4"),
        *("--eval-examples", "4", "--eval-new-tokens", "2", "--task", "reverse", "--sequential-steps", "2"),
        *("--prefix-sharing", "off", "--static-cache", "true", "--pack-rows", "off", "--out", str(tmp_path)),
        *[arg for loop in [*loops, "library-own-fwd-bwd"] for arg in ("--versus", loop)],
    )
    table = pd.read_csv(tmp_path / "performance.csv")
    assert sorted(set(table.section)) == ["eval", "sweep", "train"]
    # The training step against the fixed-shape plain step captured by hand (eager on a CPU), the
    # eager plain passes, itself with the capture off, packed to its token budget, and its own
    # forward and backward alone (its overhead).
    assert table.versus[table.section == "train"].tolist() == [
        "plain-captured",
        "plain-eager",
        "library-eager-train",
        "library-packed-train",
        "library-own-fwd-bwd",
    ]
    assert table.versus[table.section == "sweep"].tolist() == ["plain-eager", "library-eager-steps"]
    assert table.identical.all() and (table.dtype == "float32").all() and (table.calls == 3).all()
    assert table.agreement.str.contains("rows equal to plain-eager: 1").any()
    for column in ("library_s", "other_s", "library_first_s", "other_first_s"):
        assert (table[column] > 0).all()
    assert ((table.library_min_s <= table.library_s) & (table.library_s <= table.library_max_s)).all()
    assert ((table.ratio_wall_min <= table.ratio_wall) & (table.ratio_wall <= table.ratio_wall_max)).all()


def test_proxies_count_few_host_synchronisations_per_decoding_pass(tmp_path):
    """The decoding loop reads the device back every few tokens, not per token: at most 2 host
    synchronisations per pass over a sweep (the bound the loop is built to)."""
    run_script(
        "bench/proxies.py",
        *("--models", "tiny", "--device", "cpu", "--sweep-steps", "4", "--new-tokens", "16"),
        *("--train-steps", "2", "--task", "reverse", "--gpu-path", "true", "--out", str(tmp_path)),
    )
    table = pd.read_csv(tmp_path / "proxies.csv").set_index(["section", "who"])
    assert table.loc[("sweep", "library"), "passes"] == 16
    assert table.loc[("sweep", "library"), "syncs_per_unit"] <= 2
    # Losses are read back every 10 steps, not per step: a step reads back only host-side values (the
    # epoch's permutation, here once per step, and the optimiser's step counter), packed or not (a
    # packed pass builds its layout on the host, where the batch was made), captured or not.
    for who in ("library", "library, packed loss passes", "library, step captured as a CUDA graph"):
        assert table.loc[("train", who), "syncs_per_unit"] <= 2
    assert table.loc[("sweep", "library"), "ops"] > 0
    # On a CPU the profiled time splits into matrix products and the rest; single runs (not differences
    # of two, which are noise at this shape) find both on each side.
    for row in (("sweep", "library"), ("sweep", "plain"), ("train", "plain")):
        assert table.loc[row, "matmul_ms_per_unit"] > 0 and table.loc[row, "other_ms_per_unit"] > 0
    # With the step captured as a CUDA graph the host launches what runs around the replay: the batch's
    # buffers, the optimiser, the clipping (the captured forward and backward count as one operation).
    captured = table.loc[("train", "library, step captured as a CUDA graph"), "ops_per_unit"]
    assert 1 <= captured < table.loc[("train", "library"), "ops_per_unit"] / 2


def test_memory_model_splits_a_step_and_checkpointing_keeps_less(tmp_path):
    small = build_llama_dir(tmp_path / "small", num_hidden_layers=2)
    wide = build_llama_dir(tmp_path / "wide", num_hidden_layers=3, hidden_size=128, intermediate_size=320)
    run_script(
        "bench/memory.py",
        *("--runs", f"{small}:reverse:fp32", f"{wide}:reverse:fp32", "--threads", "1", "--out", str(tmp_path / "out")),
    )
    table = pd.read_csv(tmp_path / "out" / "memory.csv")
    assert len(table) == 4 and (table.activations_gib > 0).all() and (table.workspace_gib >= 0).all()
    for _, model in table.groupby("model"):
        plain, checkpointed = model[~model.checkpointing].iloc[0], model[model.checkpointing].iloc[0]
        assert checkpointed.activations_gib < plain.activations_gib
        assert abs(plain.peak_gib - (plain.weights_gib + plain.activations_gib + plain.workspace_gib)) < 1e-9
    fit = pd.read_csv(tmp_path / "out" / "memory_fit.csv")
    assert (fit.weights_gib.round(2) == 14.96).all() and (fit.peak_gib > fit.weights_gib).all()


def test_timestamper_splits_redrawn_bars_and_reports_the_longest_silence(tmp_path):
    """The silence before "b" is bounded from both sides by what this test sees, with no bound on
    how fast the machine is: "a" is written and its stamp read back before the pause starts, so the
    timestamper read "a" before it and "b" after it (at least `PAUSE` apart), and both within the
    test's own stretch from writing "a" to reading the stamp of "b". The report lists the longest
    silences first."""
    pause = 1.0
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(BENCH / "timestamps.py"), "--top", "4", "--out", str(tmp_path / "gaps.txt")]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    ) as stamper:
        assert stamper.stdin is not None and stamper.stdout is not None and stamper.stderr is not None
        before = time.monotonic()
        stamper.stdin.write(b"a\n")
        stamper.stdin.flush()
        first = stamper.stdout.readline().decode()  # "a" was read and stamped
        time.sleep(pause)
        stamper.stdin.write(b"b\rc\nd\n")  # a redrawn bar, then a plain line; one write
        stamper.stdin.flush()
        second = stamper.stdout.readline().decode()
        after = time.monotonic()
        stamper.stdin.close()
        rest = stamper.stdout.read().decode()
        errors = stamper.stderr.read().decode()
        assert stamper.wait(timeout=120) == 0, errors
    stamped = [line.split(maxsplit=1)[1] for line in (first + second + rest).splitlines()[:4]]
    assert stamped == ["a", "b", "c", "d"]  # the carriage return splits a redrawn line
    report = (tmp_path / "gaps.txt").read_text().splitlines()
    assert report[0].startswith("wall time") and ", 4 lines;" in report[0]
    gaps = {line.rsplit(": ", 1)[1]: float(line.split()[0]) for line in report[1:]}
    assert sorted(gaps) == ["a", "b", "c", "d"]
    assert pause <= gaps["b"] <= after - before + 0.05  # the report rounds to 0.1 s
    listed = [float(line.split()[0]) for line in report[1:]]
    assert listed == sorted(listed, reverse=True)


@pytest.mark.slow  # a few minutes: the whole GPU script at tiny shapes
def test_the_gpu_script_runs_dry_on_the_cpu(tmp_path):
    """`gpu.sh` (run where a GPU is lent, with little time to spare) at tiny shapes on the CPU: every
    step runs and writes its table, the compiled baselines included (traced by `aot_eager`: inductor's
    C++ compilation takes minutes per graph on a small CPU), the extra command runs, and the tests of
    the CUDA graph are skipped, not failed."""
    environment = {**os.environ, "DEVICE": "cpu", "FIRST": "tiny", "MODELS": "tiny", "SMALL": "tiny", "CALLS": "3"}
    environment |= {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "BUDGET": "3000"}
    environment |= {"EXTRA": 'echo "extra in $PWD" > "$OUT/extra.txt"', "EXTRA_SECONDS": "30"}
    done = subprocess.run(
        ["bash", str(BENCH / "gpu.sh"), str(tmp_path)], capture_output=True, text=True, env=environment, timeout=2400
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = {str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()}
    assert written == {
        "performance.csv",
        "performance.json",
        "smaller/performance.csv",
        "smaller/performance.json",
        "extra.txt",
        "proxies/options.txt",
        "proxies/proxies.csv",
    }
    assert (tmp_path / "extra.txt").read_text().strip() == f"extra in {ROOT}"
    for table in (pd.read_csv(tmp_path / "performance.csv"), pd.read_csv(tmp_path / "smaller" / "performance.csv")):
        # Against plain transformers at its best and eager, and the library's step packed to its budget.
        assert set(table.versus[table.section != "train"]) == {"plain-static-compiled", "plain-eager"}
        assert set(table.versus[table.section == "train"]) == {"plain-compiled", "plain-eager", "library-packed-train"}
        assert table.identical.all() and (table.calls == 3).all()
    assert "skipped" in done.stdout  # the CUDA tests, on the CPU


def test_explorer_latency_times_each_kind_of_update(tmp_path):
    """The explorer's latency benchmark in this process (`--browser false`): one row per kind of update,
    each timed once per repeat (the script checks that every move made exactly one update), and the
    continuations' lengths beside the clicks."""
    pytest.importorskip("anywidget")
    run_script(
        "bench/explorer_latency.py",
        "--models",
        "organism",
        "--repeats",
        "2",
        "--browser",
        "false",
        "--out",
        str(tmp_path),
    )
    table = pd.read_csv(tmp_path / "explorer_latency.csv")
    assert table.action.tolist() == ["slider", "click", "revisit", "click from the full model"]
    assert (table.measured == "kernel").all() and (table.repeats == 2).all()
    assert (table.min_ms <= table.median_ms).all() and (table.median_ms <= table.max_ms).all()
    clicks = table[table.action.str.startswith("click")]
    assert clicks.new_tokens.between(0, 12).all() and table.new_tokens.isna().sum() == 2
    assert (table.sweep_steps == 129).all() and (table.precompute_s > 0).all()
