"""experiments/sft_patterns.py end to end, run as a command with tiny settings on a tiny random model
standing in for the base organism (the measurements themselves are tested in tests/sft/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ..conftest import build_llama_dir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "sft_patterns.py"


def run(*argv: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_help_lists_the_stages_and_options():
    text = run("--help").stdout
    for option in ("organism,smollm2,select,grouping", "--probe-steps", "--train-pairs", "--no-png", "--base"):
        assert option in text


@pytest.mark.slow
def test_organism_and_select_stages_write_their_tables(tmp_path):
    base = build_llama_dir(tmp_path / "base")  # stands in for the base organism (not trained here)
    runs = tmp_path / "runs"
    common = ["--base", str(base), "--runs", str(runs), "--out", str(tmp_path / "figures"), "--no-png"]
    out = tmp_path / "figures" / "organism"  # <out>/<model>
    run("organism", "--steps", "3", *common)
    table1 = pd.read_csv(out / "sft_table1.csv")
    assert len(table1) == 11 and table1.task.iloc[-1] == "mean" and (table1.n_examples == 32).all()
    assert set(pd.read_csv(out / "sft_composition.csv").composite) == {
        "organism/plural+uppercase",
        "organism/reverse+uppercase",
    }
    assert list(pd.read_csv(out / "sft_accuracy.csv").step.unique()) == [0, 3]
    assert (out / "sft_fig5_dynamics.html").is_file() and (runs / "organism_sft_seed0" / "run.json").is_file()

    sizes = ["--steps", "2", "--probe-steps", "2", "--eval-examples", "3", "--pattern-examples", "3"]
    select = ["select", "--targets", "reverse", "--candidates", "plural", "uppercase", "capitalize", "--k", "1"]
    done = run(*select, "--seeds", "1", "--draws", "1", "--train-pairs", "6", *sizes, *common)
    assert done.stdout.count("accuracy") == 4  # none, selected, random, target
    table = pd.read_csv(out / "sft_data_selection_runs.csv")
    assert list(table.condition) == ["none", "selected", "random", "target"] and (table.n_eval == 3).all()
    summary = pd.read_csv(out / "sft_data_selection.csv")
    assert "selected - random" in set(summary.condition)
    times = pd.read_csv(out / "sft_times.csv")
    assert list(times.stage) == ["organism", "select (organism)"]
