"""Values an option refuses are usage errors while the command line is read: one line naming the
option and the value, exit 2, before any import of torch, any model load or any write."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headsup_lens.cli import main

EVALUATE = ["evaluate", "--task", "organism/reverse", "--mask", "m.safetensors"]


def refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--alpha", "1.5", "--alpha must lie in [0, 1], got 1.5"),
        ("--batch-size", "0", "--batch-size must be >= 1, got 0"),
        ("--max-new-tokens", "0", "--max-new-tokens must be >= 1, got 0"),
        ("--alpha", "nan", "--alpha: must be a finite number, got 'nan'"),
    ],
)
def test_evaluation_options_out_of_range_are_usage_errors(tmp_path, capsys, option, value, expected):
    out = tmp_path / "out"
    err = refused([*EVALUATE, "--out", str(out), option, value], capsys)
    assert expected in err
    assert not out.exists()


@pytest.mark.parametrize("device", ["gpu", "mps", "meta", "cuda:x", ""])
def test_devices_torch_cannot_run_the_model_on_are_refused_with_the_accepted_forms(tmp_path, capsys, device):
    err = refused([*EVALUATE, "--out", str(tmp_path / "out"), "--device", device], capsys)
    assert f"--device must be cpu, cuda or cuda:N (N: a GPU index), got {device!r}" in err


def test_device_names_are_read_in_any_case():
    from headsup_lens.cli import command_parsers

    parser = command_parsers()["evaluate"]
    for typed, read in (("CPU", "cpu"), ("Cuda:1", "cuda:1"), ("cpu", "cpu")):
        assert parser.parse_args([*EVALUATE[1:], "--out", "o", "--device", typed]).config.device == read


@pytest.mark.parametrize("threads", ["0", "-1"])
def test_threads_below_one_are_refused(tmp_path, capsys, threads):
    err = refused(["demo", "--out", str(tmp_path / "out"), "--threads", threads], capsys)
    assert f"--threads must be >= 1, got {threads}" in err


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_non_finite_numbers_are_refused_by_every_float_option(tmp_path, capsys, value):
    argv = ["sweep", "--prompt", "p", "--out", str(tmp_path), "--order", "random", f"--memory-gb={value}"]
    err = refused(argv, capsys)
    assert f"argument --memory-gb: must be a finite number, got {value!r}" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sweep", "--prompt", "p", "--out", "o", "--order", "random", "--memory-gb", "0"], "--memory-gb must lie in"),
        (["sweep", "--prompt", "p", "--out", "o", "--order", "random", "--top-k", "0"], "--top-k must be >= 1, got 0"),
        (["sweep", "--prompt", "p", "--out", "o"], "the weight order needs --mask"),
        (["sweep", "--prompt", "p", "--out", "o", "--order", "backwards"], "invalid choice: 'backwards'"),
        (["lens", "--prompt", "p", "--out", "o", "--k", "0"], "--k must be >= 1, got 0"),
        (["pathways", "--mask", "m", "--out", "o", "--n-random", "0"], "--n-random must be >= 1, got 0"),
        (["pathways", "--mask", "m", "--out", "o", "--task", "t"], "the ablation needs --model as well as --task"),
        (["demo", "--steps", "0"], "--steps must be >= 1, got 0"),
        (["organism", "check", "--n-words", "0"], "--n-words must be >= 1, got 0"),
        (["train", "--task", "t", "--out", "o", "--steps", "-5"], "--steps must be > 0, got -5"),
        (["train", "--task", "t", "--out", "o", "--lr", "inf"], "--lr: must be a finite number, got 'inf'"),
        (["compare-methods", "--task", "t", "--out", "o", "--schedule", "slow"], "invalid choice: 'slow'"),
        (["selfcheck", "--seed", "-1"], "--seed must be >= 0, got -1"),
    ],
)
def test_counts_and_combinations_are_checked_with_the_options(capsys, argv, expected):
    assert expected in refused(argv, capsys)


def test_a_refused_value_costs_no_torch_import():
    code = (
        "import sys\n"
        "from headsup_lens.cli import main\n"
        "try:\n"
        "    main(['sweep', '--prompt', 'p', '--out', 'o', '--order', 'random', '--top-k', '0'])\n"
        "except SystemExit as e:\n"
        "    print(e.code, 'torch' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["2", "False"], run.stderr


@pytest.mark.parametrize(
    "extra", [["train"], ["evaluate", "--mask", "m.safetensors"], ["pathways", "--mask", "m", "--model", "organism"]]
)
def test_an_unknown_task_is_refused_before_torch_is_imported(extra, tmp_path):
    out = tmp_path / "out"
    argv = [*extra, "--task", "no-such-task", "--out", str(out)]
    code = f"import sys\nfrom headsup_lens.cli import main\nrc = main({argv!r})\nprint(rc, 'torch' in sys.modules)\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.split() == ["2", "False"], run.stderr
    assert "unknown task 'no-such-task'" in run.stderr
    assert not out.exists()  # nothing written
