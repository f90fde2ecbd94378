"""The test suite itself: reproducible property tests in the default run, an exploring profile in the
slow run, and the numerically sensitive files run again by CI under another CPU kernel set."""

from __future__ import annotations

import re
import types
from pathlib import Path

from hypothesis import settings

from . import conftest

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_run_draws_the_same_examples_every_time_and_keeps_no_database():
    assert settings.default.derandomize is True
    assert settings.default.database is None
    assert settings.default.deadline is None


def test_the_slow_command_also_explores_the_property_tests(monkeypatch):
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    config = types.SimpleNamespace(option=types.SimpleNamespace(markexpr="slow"), getoption=lambda *a, **k: None)
    try:
        conftest.pytest_configure(config)
        assert config.option.markexpr == "slow or hypothesis"  # hypothesis marks every @given test
        assert settings.default.derandomize is False and settings.default.max_examples == 400
    finally:
        settings.load_profile("headsup")
    default_run = types.SimpleNamespace(option=types.SimpleNamespace(markexpr="not slow"), getoption=lambda *a: None)
    conftest.pytest_configure(default_run)
    assert default_run.option.markexpr == "not slow" and settings.default.derandomize is True


def sensitive_paths() -> list[str]:
    lines = (ROOT / "tests" / "kernel_sensitive.txt").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_every_listed_sensitive_test_file_again_under_the_default_kernels():
    paths = sensitive_paths()
    assert paths and all((ROOT / path).exists() for path in paths), [p for p in paths if not (ROOT / p).exists()]
    assert all(path.startswith("tests/") for path in paths)
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "tests/kernel_sensitive.txt" in script
    second_pass = [line for line in script.splitlines() if "ATEN_CPU_CAPABILITY=default" in line and "pytest" in line]
    assert len(second_pass) == 1 and re.search(r'"\$\{sensitive\[@\]\}"', second_pass[0])
