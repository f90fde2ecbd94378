"""Expected failures end as one line on stderr and a non-zero exit code; --debug shows the traceback."""

from __future__ import annotations

import os

import pytest

from headsup_lens.cli import main
from headsup_lens.cli._registry import check_out_dir, mask_file
from headsup_lens.data import load_task


def test_unknown_task_suggests_close_names(capsys):
    with pytest.raises(ValueError, match="did you mean 'organism/reverse'"):
        load_task("organism/revrse")
    with pytest.raises(ValueError, match="did you mean 'organism/antonym'"):
        load_task("organism/antonymn")
    assert main(["train", "--task", "organism/uppercse", "--out", "unused-out"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'organism/uppercase'" in err and not os.path.exists("unused-out")


def test_debug_shows_the_traceback():
    with pytest.raises(ValueError, match="unknown task"):
        main(["--debug", "train", "--task", "nope", "--out", "unused-out"])


def test_out_that_is_a_file_fails_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="--out .* is a file"):
        check_out_dir(blocker)
    with pytest.raises(ValueError, match="cannot be created"):
        check_out_dir(blocker / "sub")
    assert check_out_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checked, not created
    assert main(["train", "--task", "organism/reverse", "--out", str(blocker), "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and err.count("\n") == 1


def test_an_empty_out_is_refused_not_taken_as_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="--out is empty"):
        check_out_dir("")
    assert main(["evaluate", "--task", "organism/reverse", "--mask", "missing", "--out", ""]) == 2
    err = capsys.readouterr().err
    assert "--out is empty" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_out(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="cannot be written"):
            check_out_dir(locked / "run")
    finally:
        locked.chmod(0o700)


def test_mask_option_accepts_a_run_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ValueError, match="folder without mask.safetensors"):
        mask_file(str(run))
    (run / "mask.safetensors").write_bytes(b"")
    assert mask_file(str(run)) == run / "mask.safetensors"
    assert mask_file(str(run / "mask.safetensors")) == run / "mask.safetensors"
    with pytest.raises(ValueError, match="--mask .*: no such file"):
        mask_file(str(tmp_path / "missing.safetensors"))


def test_library_argument_names_become_the_commands_flags():
    from headsup_lens.cli._main import one_line
    from headsup_lens.cli._train import TrainCommand

    config = TrainCommand(task=["organism/reverse"], out="o")
    assert one_line(ValueError("start afresh (resume=False; CLI: --fresh)"), config) == "start afresh (--fresh)"
    assert one_line(ValueError("pass another out_dir or resume=False"), config) == "pass another --out or --fresh"
    assert "--data-dir" in one_line(ValueError("point HEADSUP_DATA_DIR (or data_dir=...) at a folder"), config)
    # TrainConfig's fields are options too (nested): their names become flags where they are not prose
    text = one_line(ValueError("invalid TrainConfig: steps must be >= 1; max_grad_norm must be >= 0"), config)
    assert text == "invalid TrainConfig: --steps must be >= 1; --max-grad-norm must be >= 0"
    assert one_line(ValueError("the steps of task 'x' in /runs/batch_size/a"), config) == (
        "the steps of task 'x' in /runs/batch_size/a"
    )


def test_the_option_is_named_as_typed(tmp_path, capsys):
    """The older underscore spelling is accepted, and an error names it as the user wrote it."""
    from headsup_lens.cli import command_line
    from headsup_lens.cli._main import one_line

    config, options, _, _ = command_line("train").read(["--task", "t", "--out", "o", "--max_grad_norm", "2"])
    assert options.typed == {"task": "--task", "out": "--out", "train.max_grad_norm": "--max_grad_norm"}
    assert options.within("train") == {"max_grad_norm"}
    assert one_line(ValueError("max_grad_norm must be >= 0"), config, options) == "--max_grad_norm must be >= 0"
    # a value the config refuses is a usage error while the command line is read, named as typed
    with pytest.raises(SystemExit) as refused:
        main(["train", "--task", "t", "--out", "o", "--max_grad_norm", "-1"])
    assert refused.value.code == 2 and "--max_grad_norm must be >= 0" in capsys.readouterr().err


def exit_code(argv: list[str]) -> int:
    """`headsup ARGV`'s exit code: what `main` returns, or the code of a usage error (argparse exits)."""
    try:
        return main(argv)
    except SystemExit as error:
        return int(error.code or 0)


def test_compare_methods_names_n_eval_not_the_argument_it_is_passed_on_as(tmp_path, capsys):
    """`--n-eval 0` used to fail after every method had run, as "n_examples must be >= 1"."""
    out = tmp_path / "out"
    code = exit_code(["compare-methods", "--task", "organism/reverse", "--out", str(out), "--n-eval", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "--n-eval must be >= 1" in err and "n_examples" not in err
    code = exit_code(["compare-methods", "--task", "organism/reverse", "--out", str(out), "--n-examples", "0"])
    assert code == 2 and "--n-examples must be >= 1" in capsys.readouterr().err
    assert not out.exists()
