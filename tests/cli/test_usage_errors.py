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
    from headsup_lens.cli import command_line

    line = command_line("evaluate")
    for typed, read in (("CPU", "cpu"), ("Cuda:1", "cuda:1"), ("cpu", "cpu")):
        assert line.read([*EVALUATE[1:], "--out", "o", "--device", typed])[0].device == read


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
        (
            ["sweep", "--prompt", "p", "--out", "o", "--order", "random", "--top-k", "-1"],
            "--top-k must be >= 0, got -1",
        ),
        (["sweep", "--prompt", "p", "--out", "o"], "the weight order needs --mask"),
        (["sweep", "--prompt", "p", "--out", "o", "--order", "backwards"], "invalid choice: 'backwards'"),
        (["lens", "--prompt", "p", "--out", "o", "--k", "0"], "--k must be >= 1, got 0"),
        (["lens", "--prompt", "p", "--out", "o", "--gate", "query", "--alpha", "0.5"], "the query gate takes alpha=0"),
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
        "    main(['sweep', '--prompt', 'p', '--out', 'o', '--order', 'random', '--top-k', '-1'])\n"
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


def test_names_devices_presets_files_and_batches_are_refused_before_torch_is_imported(tmp_path):
    """Every name and option a command can check without torch is checked in the same fast path as the
    numbers: one line, exit 2, nothing imported beyond the command line, nothing written."""
    from headsup_lens._validate import cuda_missing

    from ..conftest import cli_in_a_fresh_process

    out, mask, missing = tmp_path / "out", tmp_path / "m.safetensors", str(tmp_path / "missing.safetensors")
    mask.write_bytes(b"never read")
    task = ["--task", "organism/reverse"]
    cases = [
        (["train", *task, "--preset", "fsat"], "unknown preset 'fsat' (--preset); did you mean 'fast'?"),
        (["evaluate", *task, "--mask", str(mask), "--model", "smolm2"], "did you mean 'smollm2'?"),
        (["lens", "--prompt", "farm", "--model", str(tmp_path / "nowhere")], "is not a Hugging Face model directory"),
        (["lens", "--prompt", "farm", "--model", "missing.gguf"], "nor a .gguf file or wheel that exists"),
        (["fetch-model", "smolm2"], "did you mean 'smollm2'?"),
        (["train", *task, "--batch-size", "1000"], "--batch-size 1000 is larger than the 140 training pairs of"),
        (["demo", "--batch-size", "500"], "--batch-size 500 is larger than the 140 training pairs of"),
        (["organism", "train", "--batch-size", "100000"], "larger than the 6000 distinct examples"),
        (["demo", "--masks", str(tmp_path)], "no stored mask for"),
        (["evaluate", *task, "--mask", missing], "no such file"),
        (["pathways", "--mask", missing], "no mask files there"),
        (["pathways", "--mask", str(mask), "--n-random", "2"], "--n-random 2: they configure the ablation, which runs"),
        (["bake", "--mask", str(mask), "--format", "onnx"], "--format must be hf or gguf, not 'onnx'"),
        (["sweep", "--prompt", "farm", "--order", "random", "--mask", str(mask)], "the random order does not read"),
        (["lens", "--prompt", "farm", "--gate", "query"], "no --mask is given"),
        (["similarity", "--prompt", "farm"], "give --instruction"),
        (["train", *task, "--shard", "fsdp"], "--shard fsdp shards the model over the ranks of a torchrun job"),
        (["sweep", "--prompt", "farm", "--order", "random", "--shard", "fsdp"], "start the command with `torchrun"),
    ]
    if cuda_missing() is not None:  # a machine without CUDA: refused at once, without asking torch
        cases.append((["train", *task, "--device", "cuda"], "--device cuda was asked for but CUDA is not available"))
    argv = [[*command, "--out", str(out)] if command[0] != "fetch-model" else command for command, _ in cases]
    results, torch_imported = cli_in_a_fresh_process(argv)
    for (command, expected), (code, err) in zip(cases, results):
        assert code == 2 and expected in err and err.count("\n") == 1, (command, err)
    assert not torch_imported and not out.exists()


def test_a_task_name_where_a_task_is_wanted_says_how_to_load_it(llama):
    from headsup_lens import TrainConfig, evaluate, load_task, train_mask, train_masks
    from headsup_lens.sft import finetune_

    with pytest.raises(
        TypeError, match=r"train_mask\(\): argument task='organism/reverse'.*hl\.load_task\('organism/reverse'\)"
    ):
        train_mask(llama, "organism/reverse", TrainConfig.fast(steps=1))
    with pytest.raises(
        TypeError, match=r"\[hl\.load_task\(name\) for name in \['organism/reverse', 'organism/plural'\]\]"
    ):
        train_masks(llama, ["organism/reverse", "organism/plural"])
    with pytest.raises(TypeError, match=r"evaluate\(\): argument task=.*hl\.load_task\('organism/reverse'\)"):
        evaluate(llama, "organism/reverse", None)
    with pytest.raises(TypeError, match=r"finetune_\(\): argument tasks=.*hl\.load_task\(name\)"):
        finetune_(llama, ["organism/reverse"])
    with pytest.raises(TypeError, match=r"argument mask='m.safetensors'.*hl\.HeadMask\.load\('m.safetensors', model\)"):
        evaluate(llama, load_task("organism/reverse"), "m.safetensors")
    with pytest.raises(TypeError, match=r"argument model='organism'.*hl\.load_model\('organism'\)"):
        train_mask("organism", load_task("organism/reverse"))


@pytest.mark.parametrize("argv", [[], ["--no-progress"], ["--debug"]])
def test_a_bare_headsup_lists_the_commands(argv, capsys):
    from headsup_lens.cli._registry import LAZY

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("headsup: error: choose a command:") and "COMMAND --help" in err
    for name, (_, help_text) in LAZY.items():
        assert f"  {name} " in err and help_text in err
