"""experiments/sft_patterns.py end to end, run as a command with tiny settings on a tiny random model
standing in for the base organism (the measurements themselves are tested in tests/sft/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from headsup_lens.options import parse

from ..conftest import build_gemma3_dir, build_llama_dir, load_script

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
    for option in ("organism,smollm2,lora,select,grouping", "--probe-steps", "--train-pairs", "--no-png", "--base"):
        assert option in text


def script_options():
    """The script's `Options`, imported from its file."""
    return load_script("sft_patterns.py").Options


@pytest.mark.parametrize(
    ("argv", "model"),
    [
        (["organism"], "organism"),
        (["select"], "organism"),
        (["smollm2"], "smollm2"),
        (["lora"], "smollm2"),
        (["grouping"], "smollm2"),
        (["lora", "--model", "gemma3-270m"], "gemma3-270m"),
        (["select", "--model", "gemma3-270m"], "gemma3-270m"),
    ],
)
def test_each_stage_has_its_default_model_and_a_given_one_wins(argv, model):
    options, _ = parse(script_options(), argv)
    assert options.model == model and options.stage == argv[0]


@pytest.mark.slow
def test_lora_stage_on_another_model_writes_to_its_own_folders(tmp_path):
    """The LoRA stage on a model other than SmolLM2 (a tiny Gemma-3): its tables in `<out>/<model>/`,
    its run folder named after the model (never SmolLM2's), its stage and model in sft_times.csv."""
    model = build_gemma3_dir(tmp_path / "tiny-gemma")
    runs, figures = tmp_path / "runs", tmp_path / "figures"
    tasks = ["--tasks", "organism/plural", "organism/uppercase"]
    run("lora", "--model", str(model), *tasks, "--steps", "2", "--runs", str(runs), "--out", str(figures), "--no-png")
    out = figures / "tiny-gemma"
    assert (runs / "tiny-gemma_sft_seed0" / "run.json").is_file() and not (runs / "smollm2_sft_seed0").exists()
    assert set(pd.read_csv(out / "sft_final_scores.csv").task) == {"organism/plural", "organism/uppercase"}
    assert list(pd.read_csv(out / "sft_accuracy.csv").step.unique()) == [0, 2]
    times = pd.read_csv(out / "sft_times.csv")
    assert list(times.stage) == [f"lora ({model})"] and '"method": "lora"' in times.settings.iloc[0]
    # Table 1 with intervals: the example patterns average to the run's own pattern before SFT
    intervals = pd.read_csv(out / "sft_table1_intervals.csv")
    table1 = pd.read_csv(out / "sft_table1.csv").set_index("task")
    gini = intervals[intervals.statistic == "gini"].set_index("task")
    for task in ("organism/plural", "organism/uppercase"):
        assert gini.loc[task, "before"] == pytest.approx(table1.loc[task, "gini_before"], rel=1e-4)
        assert gini.loc[task, "after"] == pytest.approx(table1.loc[task, "gini_after"], rel=1e-4)
    # a second seed adds its rows, a seed run again replaces its own; the reading is over both seeds
    for seed in ("1", "0"):
        run("lora", "--model", str(model), *tasks, "--steps", "2", "--seed", seed, "--runs", str(runs),
            "--out", str(figures), "--no-png")  # fmt: skip
    again = pd.read_csv(out / "sft_table1_intervals.csv")
    assert sorted(again.seed.unique()) == [0, 1] and len(again) == 2 * len(intervals)
    assert set(pd.read_csv(out / "sft_table1_seeds.csv").seeds) == {2}


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
    done = run(*select, "--seeds", "1", "--draws", "1", "--train-pairs", "16", *sizes, *common)
    assert done.stdout.count("accuracy") == 4  # none, selected, random, target
    table = pd.read_csv(out / "sft_data_selection_runs.csv")
    assert list(table.condition) == ["none", "selected", "random", "target"] and (table.n_eval == 3).all()
    summary = pd.read_csv(out / "sft_data_selection.csv")
    assert "selected - random" in set(summary.condition)
    times = pd.read_csv(out / "sft_times.csv")
    assert list(times.stage) == ["organism", "select (organism)"]
