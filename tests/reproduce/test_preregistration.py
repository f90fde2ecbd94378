"""Rules before data, as the history shows: every preregistered entry of a committed analysis plan was
committed, as it reads today, before the first commit of any result it judges (its seeds' masks, runs on
the paper's schedule, the organism's calibration)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import tomllib

from headsup_lens.evaluation._plan import AnalysisPlan
from headsup_lens.training import safe_name

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "figures").glob("*/analysis_plan.toml"))


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def _history_available() -> bool:
    try:
        return git("rev-parse", "--is-shallow-repository") == "false"
    except (OSError, subprocess.CalledProcessError):
        return False


pytestmark = pytest.mark.skipif(not _history_available(), reason="needs the project's full git history")


def first_commit(path: Path) -> str | None:
    """The commit that first added `path` (a file, or anything under a folder), or None."""
    found = git("log", "--diff-filter=A", "--format=%H", "--", str(path.relative_to(ROOT))).splitlines()
    return found[-1] if found else None


def results_of(folder: Path, plan: AnalysisPlan) -> list[Path]:
    """The result paths the plan's preregistered entries judge."""
    paths: list[Path] = []
    for entry in plan.claims:
        if not entry.preregistered:
            continue
        for seed in entry.seeds:
            suffix = "" if seed == 0 else f"_seed{seed}"
            paths += [
                folder / "masks" / f"{safe_name(entry.task)}{suffix}.safetensors",
                folder / "paper_schedule" / f"{entry.task}{suffix}",
            ]
    if plan.calibration is not None:
        paths += [folder / "verdict_calibration.csv", folder / "verdict_calibration_runs.csv"]
    return list(dict.fromkeys(paths))


def _preregistered(text: str) -> list[dict]:
    return [c for c in tomllib.loads(text)["claims"] if c["preregistered"]]


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.parent.name)
def test_preregistered_entries_precede_their_results_and_never_changed(path):
    plan = AnalysisPlan.read(path)
    if not any(c.preregistered for c in plan.claims):
        pytest.skip(f"{path.parent.name}'s plan preregisters nothing")
    added = first_commit(path)
    assert added is not None, f"{path} is not committed"
    then = git("show", f"{added}:{path.relative_to(ROOT)}")
    assert _preregistered(then) == _preregistered(path.read_text(encoding="utf-8")), (
        f"{path}: a preregistered entry changed after the plan's first commit {added[:9]}"
    )
    checked = 0
    for result in results_of(path.parent, plan):
        commit = first_commit(result)
        if commit is None:
            continue  # not committed yet (a run still going)
        checked += 1
        assert commit != added, f"{result} was committed with its plan ({added[:9]}), not after it"
        ancestor = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", added, commit])
        assert ancestor.returncode == 0, f"{result} ({commit[:9]}) was committed before its plan ({added[:9]})"
    assert checked, f"{path}: no committed result of its preregistered entries was found to check"
