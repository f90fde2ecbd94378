"""Tables people read: printed compact (rounded, whole numbers as integers, within 100 columns, the
full table named in the CSV), and the closing line lists every file written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headsup_lens.cli import main
from headsup_lens.cli._outputs import TABLE_WIDTH, compact_table

ROOT = Path(__file__).resolve().parents[2]


def test_a_wide_evaluation_table_prints_compact_and_within_the_width():
    """The committed SmolLM2 table: many columns, unrounded floats, `n_kept` read back as 270.0."""
    table = pd.read_csv(ROOT / "figures" / "smollm2" / "tables12_evaluation.csv")
    table = table[table.task == "sentiment"]
    text = compact_table(table, ["setting", "accuracy", "strict", "answer_nll", "n_kept"], full="results.csv")
    lines = text.splitlines()
    assert all(len(line) <= TABLE_WIDTH for line in lines)
    assert lines[0].split() == ["setting", "accuracy", "strict", "answer_nll", "n_kept"]
    masked = next(line for line in lines if line.startswith("masked "))
    assert masked.split() == ["masked", "0.71", "0.71", "0.485", "158"]  # 3 digits, a count as an integer
    hidden = len(table.columns) - 5
    assert "echo baseline" in text and lines[-1].startswith(f"({hidden} more columns in results.csv: task, instructed")
    everything = compact_table(table, full="results.csv").splitlines()  # every column asked: the last left out
    assert all(len(line) <= TABLE_WIDTH for line in everything) and "more columns in results.csv" in everything[-1]
    assert "270.0" not in text and "nan" not in text.lower()


def test_evaluate_prints_a_compact_table_and_names_every_file_it_wrote(tmp_path, capsys):
    run, out = tmp_path / "run", tmp_path / "eval"
    assert main(["train", "--task", "organism/reverse", "--preset", "fast", "--steps", "2", "--out", str(run)]) == 0
    capsys.readouterr()
    argv = ["evaluate", "--task", "organism/reverse", "--mask", str(run), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    table = printed[1:-1]  # between the task's line and the closing line (whose folder may be long)
    assert len(table) >= 6 and all(len(line) <= TABLE_WIDTH for line in table), max(table, key=len)
    assert printed[0] == "organism/reverse, 100 examples of its eval split:"
    assert printed[1].split()[:3] == ["setting", "accuracy", "strict"]
    assert printed[-1] == f"wrote to {out}: results.csv, generations.csv, evaluation.json"
    assert {"results.csv", "generations.csv", "evaluation.json"} <= {p.name for p in out.iterdir()}


def test_a_warning_is_one_line_without_a_python_source_line(tmp_path, capsys):
    """A warning printed by a command read `.../bin/headsup:8: MaskTaskWarning: ...` and then the
    source line `sys.exit(main())`; now `headsup: warning: ...` alone."""
    import os
    import subprocess
    import sys

    run = tmp_path / "run"
    assert main(["train", "--task", "organism/reverse", "--preset", "fast", "--steps", "1", "--out", str(run)]) == 0
    argv = ["evaluate", "--task", "organism/plural", "--mask", str(run), "--out", str(tmp_path / "eval")]
    argv += ["--settings", "masked", "--no-generate", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-m", "headsup_lens", *argv], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    lines = [line for line in err.splitlines() if "trained for task" in line]
    assert lines == [
        "headsup: warning: the mask was trained for task 'organism/reverse', not 'organism/plural' (column mask_task)"
    ], err
    assert "sys.exit" not in err and ".py:" not in err and "MaskTaskWarning" not in err
