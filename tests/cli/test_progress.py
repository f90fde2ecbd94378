"""`--no-progress` is one switch for every bar of a command, wherever it is written."""

import pytest

import headsup_lens._progress as progress_module
from headsup_lens.cli import main


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "_SWITCH", [None])


def sweep(llama_dir, out, *extra):
    argv = ["sweep", "--prompt", "cat", "--out", str(out), "--model", str(llama_dir), "--order", "random"]
    return main([*argv, "--max-new-tokens", "4", "--device", "cpu", "--no-png", *extra])


def test_a_sweep_shows_its_progress_on_stderr(llama_dir, tmp_path, no_delay, capsys):
    assert sweep(llama_dir, tmp_path / "a") == 0
    err = capsys.readouterr().err.replace("\r", "\n")
    assert "removal sweep (17 steps)" in err and "4/4" in err and "pass/s" in err


@pytest.mark.parametrize("where", ["after", "before"])
def test_no_progress_silences_every_bar(llama_dir, tmp_path, no_delay, capsys, where):
    if where == "after":
        code = sweep(llama_dir, tmp_path / "b", "--no-progress")
    else:
        code = main(
            [
                "--no-progress",
                "sweep",
                "--prompt",
                "cat",
                "--out",
                str(tmp_path / "b"),
                "--model",
                str(llama_dir),
                "--order",
                "random",
                "--max-new-tokens",
                "4",
                "--device",
                "cpu",
                "--no-png",
            ]
        )
    assert code == 0
    err = capsys.readouterr().err
    assert "removal sweep" not in err and "it/s" not in err and "pass/s" not in err
