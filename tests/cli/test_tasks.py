"""`headsup tasks`: names, sizes, and which tasks need the data directory."""

from __future__ import annotations

import pytest

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


def test_tasks_answers_without_torch_transformer_lens_or_pandas():
    """`headsup tasks` must not pay for the heavy imports (10 s of TransformerLens alone): checked by
    the modules it loaded, not by a time that depends on the machine."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from headsup_lens.cli import main; main(['tasks']); "
        "print('HEAVY', sorted(m for m in ('torch', 'transformer_lens', 'transformers', 'pandas') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout and "organism/reverse" in done.stdout


def test_tasks_counts_data_directory_tasks_only_when_asked(capsys):
    assert main(["tasks", "--match", "antonym", "--data-dir", "/work/does-not-exist"]) == 0
    assert main(["tasks", "--data-dir", "/work/does-not-exist"]) == 0
    out = capsys.readouterr().out
    assert "--sizes" in out and "None" not in out and "nan" not in out


@pytest.mark.parametrize(("typed", "meant"), [("antonmy", "'antonym'"), ("organism/revrese", "'organism/reverse'")])
def test_a_near_miss_of_match_says_what_was_meant(capsys, typed, meant):
    assert main(["tasks", "--match", typed]) == 2
    err = capsys.readouterr().err
    assert f"no task name contains {typed!r}; did you mean {meant}" in err and err.count("\n") == 1, err
