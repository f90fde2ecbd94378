"""experiments/methods_compare.py end to end on the organism with tiny settings (the procedure itself:
`tests/reproduce/test_methods.py`)."""

from __future__ import annotations

import pandas as pd
import pytest

from ..conftest import run_script


@pytest.mark.slow  # two subprocesses on the organism: mask training, three methods, curves
def test_methods_compare_writes_the_auroc_table_and_resumes(tmp_path):
    argv = ["--tasks", "organism/reverse", "organism/plural", "--methods", "learned_mask", "random"]
    argv += ["attribution_patching", "--steps", "3", "--k-max", "2", "--k-step", "1", "--n-eval", "2"]
    argv += ["--n-examples", "2", "--out", str(tmp_path), "--no-png"]
    run_script("methods_compare.py", *argv)
    out = tmp_path / "organism"
    aurocs = pd.read_csv(out / "methods_auroc.csv")
    assert set(aurocs.method) == {"learned_mask", "random", "attribution_patching"}
    assert {"reverse", "plural", "mean"} <= set(aurocs.columns)
    assert len(pd.read_csv(out / "methods_summary.csv")) == 6 and (out / "methods_reverse_curves.html").is_file()
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("methods/*/*")}
    assert len(stamps) == 2 * 5  # three rankings, curves and summary per task
    printed = run_script("methods_compare.py", *argv, "--rankings-only").stdout
    assert stamps == {p: p.stat().st_mtime_ns for p in out.glob("methods/*/*")} and "done in" in printed
    rankings = pd.read_csv(out / "methods_rankings.csv")
    assert set(rankings.method) == {"learned_mask", "random", "attribution_patching"} and len(rankings) == 6
