"""Progress bars of long phases: shown on stderr with counts and a rate, silenced by one switch."""

import time

import pytest

import headsup_lens._progress as progress_module
from headsup_lens._progress import activity, progress, progress_off, set_progress


@pytest.fixture
def no_delay(monkeypatch):
    """Every bar shows at once (phases of a tiny model are shorter than the usual delay)."""
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "_SWITCH", [None])
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)  # set_progress(False) sets it


def test_a_bar_shows_counts_and_a_rate_and_the_switch_silences_it(no_delay, capsys):
    for _ in progress(range(3), desc="phase", unit="step"):
        time.sleep(0.01)
    err = capsys.readouterr().err
    assert "phase: 100%" in err and "3/3" in err and "step/s" in err
    with progress_off():
        list(progress(range(3), desc="phase"))
    assert capsys.readouterr().err == ""
    set_progress(False)
    list(progress(range(3), desc="phase"))
    assert capsys.readouterr().err == ""


def test_short_phases_print_nothing(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "_SWITCH", [None])
    list(progress(range(3), desc="quick"))
    with activity("quick too"):
        pass
    assert capsys.readouterr().err == ""


def test_a_phase_without_counts_shows_its_time_moving(no_delay, capsys):
    with activity("converting") as bar:
        time.sleep(2.3)
        bar.set_postfix_str("writing")
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.strip()]
    assert any("converting: 00:02" in line for line in lines)
    assert len(lines) >= 3 and "writing" in lines[-1]


def test_the_environment_variable_silences_bars(monkeypatch, no_delay, capsys):
    monkeypatch.setenv("HEADSUP_PROGRESS", "0")
    list(progress(range(3), desc="phase"))
    assert capsys.readouterr().err == ""
