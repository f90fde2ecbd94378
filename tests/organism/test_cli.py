"""`headsup organism train` and `headsup organism check` on a tiny recipe."""

from __future__ import annotations

import json

import pytest

from headsup_lens.cli import main


def test_train_then_check(tmp_path, capsys):
    out = tmp_path / "tiny"
    code = main(
        [
            "organism",
            "train",
            "--output",
            str(out),
            "--steps",
            "3",
            "--n_layers",
            "2",
            "--n_heads",
            "4",
            "--n_kv_heads",
            "2",
            "--d_model",
            "32",
            "--d_mlp",
            "64",
            "--planted_size",
            "2",
            "--tasks",
            "reverse",
            "plural",
            "--n_words",
            "4",
            "--batch_size",
            "8",
            "--quiet",
            "true",
            "--seed",
            "3",
        ]
    )
    assert code == 0
    assert (out / "model.safetensors").is_file()
    info = json.loads((out / "training.json").read_text())
    assert info["config"]["seed"] == 3 and info["config"]["steps"] == 3
    assert sorted(json.loads((out / "planted.json").read_text())["sets"]) == ["plural", "reverse"]
    printed = capsys.readouterr().out
    assert "organism/reverse" in printed and "planted" in printed
    # Three steps teach nothing: the check prints the table and fails the bar.
    assert main(["organism", "check", "--model", str(out), "--n_words", "2", "--device", "cpu"]) == 1
    assert "below the bar: organism/reverse: planted accuracy" in capsys.readouterr().out


def test_unknown_task_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:  # a usage error: the recipe is checked as the options are read
        main(["organism", "train", "--output", str(tmp_path), "--tasks", "sing", "--quiet", "true"])
    assert exit_info.value.code == 2 and "unknown organism task" in capsys.readouterr().err


def test_check_refuses_no_words_before_loading_the_model(capsys):
    with pytest.raises(SystemExit) as exit_info:  # a usage error: checked as the options are read
        main(["organism", "check", "--model", "no-such-model", "--n-words", "0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--n-words must be >= 1" in err and "got 0" in err
