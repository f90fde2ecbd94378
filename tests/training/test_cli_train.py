"""`headsup train` and `headsup evaluate` end to end on the planted model."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from headsup_lens.cli import main
from headsup_lens.cli._train import resolve_preset
from headsup_lens.data import register_task, task_names
from headsup_lens.masks import HeadMask
from headsup_lens.training import TrainConfig

from ..conftest import build_gpt2_dir
from .planted import build_planted_dir, planted_mask, planted_task


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    if "test/planted" not in task_names():
        register_task("test/planted", lambda data_dir: planted_task())
    return build_planted_dir(tmp_path_factory.mktemp("planted"))


def test_presets_fill_only_paper_defaults():
    fast = resolve_preset("fast", TrainConfig(seed=3, steps=40))
    assert fast.steps == 40 and fast.seed == 3 and fast.lr == TrainConfig.fast().lr
    assert resolve_preset("negative", TrainConfig()).init_mean == -3.0
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_preset("quick", TrainConfig())


def test_explicit_options_win_over_the_preset_even_at_paper_defaults():
    config = resolve_preset("fast", TrainConfig(lr=0.01, init_mean=4.0), {"lr", "init_mean"})
    assert config.lr == 0.01 and config.init_mean == 4.0 and config.steps == TrainConfig.fast().steps


def test_cli_records_explicit_options_over_the_preset(planted_dir, tmp_path):
    import json

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "test/planted",
                "--out",
                str(out),
                "--model",
                str(planted_dir),
                "--device",
                "cpu",
                "--preset",
                "fast",
                "--lr",
                "0.01",
                "--init-mean",
                "4.0",
                "--steps",
                "3",
                "--no-progress",
            ]
        )
        == 0
    )
    recorded = json.loads((out / "train_config.json").read_text())
    assert recorded["lr"] == 0.01 and recorded["init_mean"] == 4.0 and recorded["min_lr"] == TrainConfig.fast().min_lr


def test_a_run_that_keeps_every_head_gets_advice_and_fresh_moves_it_aside(planted_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "train",
        "--task",
        "test/planted",
        "--out",
        str(out),
        "--model",
        str(planted_dir),
        "--device",
        "cpu",
        "--steps",
        "20",
        "--no-progress",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "kept 32/32 heads" in captured.out and "wrote" in captured.out
    assert "kept 32/32 heads: the mask removed (almost) nothing" in captured.err and "--preset fast" in captured.err
    assert main([*argv, "--fresh"]) == 0
    assert "moved the earlier run aside" in capsys.readouterr().out
    old = list(tmp_path.glob("run.old-*"))
    assert len(old) == 1 and (old[0] / "mask.safetensors").is_file() and (out / "mask.safetensors").is_file()


def test_run_problems_from_a_history():
    from headsup_lens.training._advice import run_problems

    flat = pd.DataFrame({"step": range(1, 11), "task": "t", "loss": 2.0, "n_kept": 16})
    problems = [p.problem for p in run_problems(flat, 16)]
    assert len(problems) == 2 and "kept 16/16" in problems[0] and "barely moved" in problems[1]
    learned = pd.DataFrame({"step": range(1, 11), "task": "t", "loss": [2.0] * 5 + [0.5] * 5, "n_kept": 9})
    assert run_problems(learned, 16) == []


def test_train_then_evaluate(planted_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "test/planted",
                "--out",
                str(out),
                "--model",
                str(planted_dir),
                "--device",
                "cpu",
                "--preset",
                "fast",
                "--steps",
                "60",
                "--no-progress",
            ]
        )
        == 0
    )
    mask = HeadMask.load(out / "mask.safetensors")
    assert (mask.values == planted_mask()).float().mean() >= 0.95
    assert len(pd.read_csv(out / "history.csv")) == 60 and (out / "train_config.json").is_file()
    assert (
        main(
            [
                "evaluate",
                "--task",
                "test/planted",
                "--mask",
                str(out),
                "--out",
                str(tmp_path / "eval"),  # its own folder: a training run's folder is refused
                "--model",
                str(planted_dir),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = tmp_path / "eval"
    table = pd.read_csv(out / "results.csv").set_index("setting")
    assert table.loc["masked", "accuracy"] == 1.0 and table.loc["original", "accuracy"] == 0.0
    outputs = pd.read_csv(out / "generations.csv", keep_default_na=False)  # the outputs behind every row
    assert outputs[outputs.setting == "masked"].correct.mean() == table.loc["masked", "accuracy"]
    assert set(outputs.setting) == set(table.index) and "echo baseline" in set(outputs.setting)


def test_bad_inputs_write_nothing(planted_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "no-such-task", "--out", str(out), "--model", str(planted_dir)]) == 2
    assert "unknown task 'no-such-task'" in capsys.readouterr().err and not out.exists()
    other = build_gpt2_dir(tmp_path / "gpt2")
    from headsup_lens import load_model

    HeadMask.full(load_model(other, device="cpu")).save(tmp_path / "gpt2.safetensors")
    assert (
        main(
            [
                "evaluate",
                "--task",
                "test/planted",
                "--mask",
                str(tmp_path / "gpt2.safetensors"),
                "--out",
                str(out),
                "--model",
                str(planted_dir),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    assert "does not fit model" in capsys.readouterr().err and not out.exists()
    assert (
        main(
            [
                "evaluate",
                "--task",
                "test/planted",
                "--mask",
                str(tmp_path / "none.safetensors"),
                "--out",
                str(out),
                "--model",
                str(planted_dir),
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv"])
def test_own_task_file_trains(planted_dir, tmp_path, suffix):
    import csv
    import json

    pairs = [{"input": x, "output": y} for x, y in planted_task().pairs[:24]]
    path = tmp_path / f"my_task{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(pairs))
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(p) for p in pairs) + "\n")
    else:
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, ["input", "output"])
            writer.writeheader()
            writer.writerows(pairs)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                str(path),
                "--out",
                str(out),
                "--model",
                str(planted_dir),
                "--device",
                "cpu",
                "--preset",
                "fast",
                "--steps",
                "3",
                "--batch-size",
                "12",  # the file's 24 pairs: 12 for training, 12 held out
                "--no-progress",
            ]
        )
        == 0
    )
    assert HeadMask.load(out / "mask.safetensors").metadata["task"] == "my_task"


@pytest.mark.parametrize(
    "name, content, problem",
    [
        ("empty.json", "", "is empty"),
        ("empty.jsonl", "\n", "holds no input/output pairs"),
        ("empty.csv", "", "is empty"),
        ("list.json", "[]", "non-empty JSON list"),
        ("bad.jsonl", '{"input": "a", "output": "b"}\n{"input": "a"', "line 2, column 14: not valid JSON"),
        ("cols.csv", "question,answer\na,b\n", "lacks the column(s) input, output"),
        ("type.jsonl", '{"input": 3, "output": "b"}', "line 1, field 'input': expected a string, got 3"),
    ],
)
def test_malformed_task_files_name_the_file_and_the_problem(tmp_path, capsys, name, content, problem):
    path = tmp_path / name
    path.write_text(content)
    assert main(["train", "--task", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and problem in err, err


def test_unknown_task_message_reads_cleanly(capsys, tmp_path):
    assert main(["train", "--task", "my_task", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'my_task' (`headsup tasks`" in err and ";" not in err.split("(")[0]
    assert ".json, .jsonl or .csv" in err


def test_a_rerun_names_the_step_it_resumes_from_and_estimates_only_the_steps_left(
    planted_dir, tmp_path, capsys, monkeypatch
):
    from headsup_lens.cli._train import _print_estimate
    from headsup_lens.training import resume_step
    from headsup_lens.training._estimate import format_duration

    out = tmp_path / "run"
    assert resume_step(out) is None
    argv = [
        "train",
        "--task",
        "test/planted",
        "--out",
        str(out),
        "--model",
        str(planted_dir),
        "--device",
        "cpu",
        "--steps",
        "4",
        "--checkpoint-every",
        "2",
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "resuming" not in printed and resume_step(out) == 4
    # No --preset: the line says the paper's schedule is the default, and how to choose the fast one.
    assert "preset paper (the default: the paper's schedule; --preset fast trains 300 steps" in printed, printed
    assert main(argv) == 0
    assert f"resuming from the checkpoint of step 4 in {out}" in capsys.readouterr().out
    assert main([*argv, "--fresh"]) == 0
    assert "resuming" not in capsys.readouterr().out

    monkeypatch.setattr("headsup_lens.training._estimate.seconds_per_step", lambda *args: 2.0)
    model = SimpleNamespace(cfg=SimpleNamespace(device="cpu"))  # the estimate only names its device
    _print_estimate(model, [], TrainConfig(steps=6250), done=3000)
    assert f"~{format_duration(2.0 * 3250)} for the 3250 steps left of 6250" in capsys.readouterr().out
    _print_estimate(model, [], TrainConfig(steps=6250))
    printed = capsys.readouterr()
    assert f"~{format_duration(2.0 * 6250)} for 6250 steps" in printed.out
    # The measure's steps run under a bar that says what they are (minutes on a loaded machine).
    assert "estimating the training time: timing 7 steps first (--no-estimate skips this)" in printed.out


def test_a_run_folder_of_the_earlier_layout_stays_resumable_and_a_refused_resume_announces_nothing(
    planted_dir, tmp_path, capsys
):
    """A folder written before run records (train_config.json, history.csv, checkpoints/, no
    `.headsup.json`), finished or still training, continues under the same recipe; another recipe is
    refused before anything says it resumes."""
    import shutil

    from headsup_lens._io import RUN_RECORD

    out = tmp_path / "run"
    argv = ["train", "--task", "test/planted", "--out", str(out), "--model", str(planted_dir), "--device", "cpu"]
    argv += ["--preset", "fast", "--steps", "4", "--checkpoint-every", "2", "--no-progress", "--no-estimate"]
    assert main(argv) == 0
    (out / RUN_RECORD).unlink()  # the earlier layout: train_config.json, history.csv, checkpoints/
    finished = {p.name for p in out.iterdir()}
    assert {"train_config.json", "history.csv", "checkpoints", "mask.safetensors"} <= finished
    capsys.readouterr()
    # Finished: another recipe is refused from train_config.json, before the model loads ...
    assert main([*argv, "--lr", "0.05"]) == 2
    captured = capsys.readouterr()
    assert "for another recipe: lr (0.1 there, 0.05 here)" in captured.err and "resuming" not in captured.out
    # ... and the same recipe continues there (its last checkpoint is its last step).
    assert main(argv) == 0
    assert "resuming from the checkpoint of step 4" in capsys.readouterr().out
    # Still training (only checkpoints/ so far): the recipe is read from the checkpoint itself.
    for path in out.iterdir():
        if path.name != "checkpoints":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert main([*argv, "--lr", "0.05"]) == 2
    captured = capsys.readouterr()
    assert "differs from this one in recipe.lr (0.1 there, 0.05 here)" in captured.err, captured.err
    assert "resuming" not in captured.out  # a refused resume never announces one
    assert {p.name for p in out.iterdir()} == {"checkpoints"}  # and writes nothing
    assert main(argv) == 0
    assert "resuming from the checkpoint of step 4" in capsys.readouterr().out
    assert (out / "mask.safetensors").is_file() and (out / RUN_RECORD).is_file()
