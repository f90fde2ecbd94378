"""Under torchrun every rank runs the command: only rank 0 prints, every rank exits with the same code."""

from __future__ import annotations

from headsup_lens.cli import main


def test_only_rank_0_speaks(monkeypatch, capsys, tmp_path):
    argv = ["train", "--task", "no-such-task", "--out", str(tmp_path / "run")]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    monkeypatch.setenv("RANK", "0")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown task 'no-such-task'" in err
