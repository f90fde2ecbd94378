"""Progress bars of long phases: shown on stderr with counts and a rate, silenced by one switch;
in a log (stderr not a terminal) whole lines, never a redraw."""

import io
import sys
import time

import datasets.utils
import huggingface_hub.utils
import pytest
from transformers.utils import logging as hf_logging

import headsup_lens._progress as progress_module
from headsup_lens._progress import activity, progress, progress_off


@pytest.fixture
def no_delay(monkeypatch):
    """Every bar shows at once (phases of a tiny model are shorter than the usual delay)."""
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "_SWITCH", [None])
    monkeypatch.setattr(progress_module, "_FOREIGN_HIDDEN", [0])  # none hidden, as in a fresh process
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)  # progress_off sets them: none at the start


def test_a_bar_shows_counts_and_a_rate_and_the_switch_silences_it(no_delay, capsys):
    for _ in progress(range(3), desc="phase", unit="step"):
        time.sleep(0.01)
    err = capsys.readouterr().err
    assert "phase: 100%" in err and "3/3" in err and "step/s" in err
    with progress_off():
        list(progress(range(3), desc="phase"))
    assert capsys.readouterr().err == ""


def test_short_phases_print_nothing(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "_SWITCH", [None])
    list(progress(range(3), desc="quick"))
    with activity("quick too"):
        pass
    assert capsys.readouterr().err == ""


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal: bars redraw in place there."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """Call it in the test's body: pytest puts its own stderr back after fixtures are set up."""

    def swap() -> _Terminal:
        stream = _Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    return swap


def test_a_phase_without_counts_shows_its_time_moving(no_delay, terminal):
    terminal = terminal()
    with activity("converting") as bar:
        time.sleep(2.3)
        bar.set_postfix_str("writing")
    lines = [line for line in terminal.getvalue().replace("\r", "\n").splitlines() if line.strip()]
    assert any("converting: 00:02" in line for line in lines)
    assert len(lines) >= 3 and "writing" in lines[-1]


def test_a_ticker_ends_its_line_before_the_next_message(no_delay, terminal):
    terminal = terminal()
    with activity("starting: importing torch"):
        while "importing torch" not in terminal.getvalue():  # the ticker has drawn at least once
            time.sleep(0.05)
    print("headsup train: error: bad", file=sys.stderr)
    text = terminal.getvalue()
    assert "\nheadsup train: error: bad\n" in text, repr(text)


def test_in_a_log_a_bar_writes_whole_lines_at_most_every_few_seconds(no_delay, capsys):
    bar = progress(total=200, desc="mask", unit="step")
    for i in range(200):
        bar.set_postfix(loss=f"{i:.3f}")  # a refresh per step: a terminal redraws 400 times
        bar.update(1)
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("mask: ")]
    assert len(err.splitlines()) == 1 and "100% 200/200" in err and "loss=199.000" in err


def test_in_a_log_a_long_phase_writes_a_line_every_so_often(no_delay, monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "LOG_EVERY_S", 0.2)
    bar = progress(total=6, desc="sweep", unit="pass")
    for _ in range(6):
        time.sleep(0.25)
        bar.update(1)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert 2 <= len(lines) <= 7 and lines[-1].startswith("sweep: 100% 6/6")
    with activity("loading"):
        time.sleep(0.5)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith("loading: 00:0") for line in lines)


def test_the_environment_variable_silences_bars(monkeypatch, no_delay, capsys):
    monkeypatch.setenv("HEADSUP_PROGRESS", "0")
    list(progress(range(3), desc="phase"))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_tqdm_disable_silences_bars(monkeypatch, no_delay, capsys, value):
    monkeypatch.setenv("TQDM_DISABLE", value)
    list(progress(range(3), desc="phase"))
    with activity("converting"):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TQDM_DISABLE", "0")
    list(progress(range(3), desc="phase"))
    assert "phase" in capsys.readouterr().err


def _library_bars_shown() -> dict[str, bool]:
    return {
        "huggingface_hub": not huggingface_hub.utils.are_progress_bars_disabled(),
        "transformers": hf_logging.is_progress_bar_enabled(),
        "datasets": not datasets.utils.are_progress_bars_disabled(),
    }


@pytest.fixture
def library_bars_on(monkeypatch):
    """The libraries' bars shown at the start, and as they were after the test. The libraries are
    imported with this module, before any test sets their environment variables (which they read once, at import)."""
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)
    before = _library_bars_shown()
    huggingface_hub.utils.enable_progress_bars()
    hf_logging.enable_progress_bar()
    datasets.utils.enable_progress_bars()
    yield
    for shown, on, off in (
        (
            before["huggingface_hub"],
            huggingface_hub.utils.enable_progress_bars,
            huggingface_hub.utils.disable_progress_bars,
        ),
        (before["transformers"], hf_logging.enable_progress_bar, hf_logging.disable_progress_bar),
        (before["datasets"], datasets.utils.enable_progress_bars, datasets.utils.disable_progress_bars),
    ):
        (on if shown else off)()


def test_the_switch_silences_the_libraries_bars_and_restores_them(no_delay, library_bars_on):
    before = _library_bars_shown()
    assert all(before.values()), before
    with progress_off():
        assert not any(_library_bars_shown().values())
    assert _library_bars_shown() == before
    # in a log the libraries' bars (which redraw) are hidden inside a phase of ours
    with activity("loading"):
        assert not any(_library_bars_shown().values())
    assert _library_bars_shown() == before


def test_the_cli_hides_the_libraries_bars_when_the_environment_asks(monkeypatch, no_delay, library_bars_on):
    """`HEADSUP_PROGRESS=0 headsup ...`: Hugging Face's bars (weight loading, shard writing) too."""
    from headsup_lens.cli import _main

    seen = {}
    monkeypatch.setattr(_main, "_main", lambda argv: seen.update(_library_bars_shown()) or 0)
    monkeypatch.setattr(sys, "stderr", _Terminal())  # a terminal: only the switch hides them
    monkeypatch.setenv("HEADSUP_PROGRESS", "0")
    assert _main.main(["tasks"]) == 0
    assert seen and not any(seen.values())
    monkeypatch.delenv("HEADSUP_PROGRESS")
    seen.clear()
    assert _main.main(["tasks"]) == 0
    assert all(seen.values())


def test_every_other_librarys_tqdm_bar_follows_the_switch_and_the_log_rule(no_delay, terminal, capsys):
    """A library that draws a tqdm bar of its own and offers no switch (transformers' "Converting and
    de-quantizing GGUF tensors", gguf's writer): hidden by `--no-progress` / `HEADSUP_PROGRESS=0`, and
    inside our phases in a log; shown in a terminal when progress is on; as before after the block."""
    import tqdm
    import tqdm.auto

    def library_bar() -> None:  # as those libraries draw it: no `disable`, no `file`
        for _ in tqdm.auto.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
        for _ in tqdm.tqdm(range(3), desc="Writing"):
            pass

    with progress_off():
        library_bar()
    assert capsys.readouterr().err == ""
    with activity("converting"):  # stderr is not a terminal here: a log
        library_bar()
    err = capsys.readouterr().err
    assert "GGUF" not in err and "Writing" not in err
    library_bar()  # outside our phases nothing is changed
    assert "Converting and de-quantizing GGUF tensors" in capsys.readouterr().err
    stream = terminal()
    with activity("converting"):  # a terminal with progress on: the libraries' bars redraw there
        library_bar()
    assert "Converting and de-quantizing GGUF tensors" in stream.getvalue() and "Writing" in stream.getvalue()


def test_in_a_log_each_stage_of_a_phase_is_written_once(no_delay, monkeypatch, capsys):
    """`headsup fetch-model` in a log printed "writing the fp32 weights" twice: the line of the
    phase's periodic tick and its last line both carried the stage. A stage is named once; the later
    lines of that stage give the elapsed time only."""
    monkeypatch.setattr(progress_module, "LOG_EVERY_S", 0.2)
    with activity("converting tiny.gguf") as bar:
        bar.set_postfix_str("reading the tokenizer")
        time.sleep(1.3)  # the phase's ticker writes a line every second
        bar.set_postfix_str("writing the fp32 weights")
        time.sleep(2.3)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2 and all(line.startswith("converting tiny.gguf: 00:0") for line in lines), lines
    assert sum("writing the fp32 weights" in line for line in lines) == 1, lines
    assert sum("reading the tokenizer" in line for line in lines) <= 1, lines
