"""`headsup tasks`: names, sizes, and which tasks need the data directory."""

from __future__ import annotations

from headsup_lens.cli import main


def test_tasks_lists_organism_tasks_with_sizes(capsys, tmp_path):
    assert main(["tasks", "--match", "organism/", "--data-dir", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    for name in ("organism/capitalize", "organism/uppercase", "organism/reverse"):
        assert name in out
    assert "built in" in out and "8 tasks, 8 built in" in out


def test_tasks_marks_paper_tasks_as_needing_data(capsys, tmp_path):
    assert main(["tasks", "--match", "antonym", "--data-dir", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.strip().startswith("antonym "))
    assert "data directory" in line and "not found" in line


def test_tasks_with_no_match_is_an_error(capsys):
    assert main(["tasks", "--match", "zzz-nothing"]) == 2
    assert "no task name contains" in capsys.readouterr().err
