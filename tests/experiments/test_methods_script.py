"""experiments/methods_compare.py on the organism with tiny settings: outputs, AUROC table, resuming."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def test_methods_compare_writes_the_auroc_table_and_resumes(tmp_path, capsys):
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import methods_compare
    finally:
        sys.path.remove(str(EXPERIMENTS))
    argv = [
        "--tasks",
        "organism/reverse",
        "organism/plural",
        "--methods",
        "learned_mask",
        "random",
        "attribution_patching",
        "--steps",
        "3",
        "--k-max",
        "2",
        "--k-step",
        "1",
        "--n-eval",
        "2",
        "--n-examples",
        "2",
        "--out",
        str(tmp_path),
        "--no-png",
    ]
    methods_compare.main(argv)
    out = tmp_path / "organism"
    aurocs = pd.read_csv(out / "methods_auroc.csv")
    assert set(aurocs.method) == {"learned_mask", "random", "attribution_patching"}
    assert {"reverse", "plural", "mean"} <= set(aurocs.columns)
    summary = pd.read_csv(out / "methods_summary.csv")
    assert len(summary) == 6 and (summary.seconds > 0).all()
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("methods/*/*")}
    assert len(stamps) == 2 * 5  # three rankings, curves and summary per task
    methods_compare.main(argv)  # a rerun finds every task done and only rewrites the combined tables
    assert stamps == {p: p.stat().st_mtime_ns for p in out.glob("methods/*/*")}
    assert "done in" in capsys.readouterr().out
    # rankings only: the table from the rankings found, plus a method ranked now
    methods_compare.main([*argv, "--rankings-only", "--methods", "learned_mask", "random", "gate_gradient"])
    rankings = pd.read_csv(out / "methods_rankings.csv")
    assert set(rankings.method) == {"learned_mask", "random", "gate_gradient"} and len(rankings) == 6
    assert rankings.auroc.between(0, 1).all()
