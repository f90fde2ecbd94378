"""Shared option groups, the one parser style, which options were given, and options in error messages."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from headsup_lens.options import (
    DataOptions,
    FigureOptions,
    Given,
    ModelOptions,
    model_arguments,
    name_options,
    option_strings,
    parse,
)


@dataclass(frozen=True)
class Inner:
    lr: float = 0.01
    """Learning rate."""
    max_grad_norm: float = 1.0
    """Clip norm."""


@dataclass(frozen=True)
class Script(FigureOptions, DataOptions, ModelOptions):
    """A script's options."""

    task: str
    """Task name."""
    n_eval: int = 24
    """Evaluation examples."""
    train: Inner = field(default_factory=Inner)
    """Training."""


def test_commands_inherit_the_shared_options_instead_of_declaring_them():
    from headsup_lens.cli._compare_methods import CompareMethodsCommand
    from headsup_lens.cli._evaluate import EvaluateCommand
    from headsup_lens.cli._lens import LensCommand
    from headsup_lens.cli._pathways import PathwaysCommand
    from headsup_lens.cli._similarity import SimilarityCommand
    from headsup_lens.cli._sweep import SweepCommand
    from headsup_lens.cli._train import TrainCommand
    from headsup_lens.demo import DemoConfig

    shared = {f.name for group in (ModelOptions, DataOptions, FigureOptions) for f in dataclasses.fields(group)}
    commands = (TrainCommand, EvaluateCommand, SweepCommand, LensCommand, SimilarityCommand, CompareMethodsCommand)
    for command in (*commands, PathwaysCommand, DemoConfig):
        assert issubclass(command, ModelOptions), command
        # pathways' --model is optional (only its ablation loads a model): the one declaration on purpose
        own = set(vars(command).get("__annotations__", {})) - ({"model"} if command is PathwaysCommand else set())
        assert not own & shared, (command.__name__, own & shared)


def test_parse_reads_dashed_and_underscore_spellings_and_records_what_was_given():
    config, given = parse(
        Script, ["--task", "t", "--data_dir", "d", "--no-png", "--max-grad-norm", "2", "--lr", "0.01"]
    )
    assert config.task == "t" and config.data_dir == "d" and config.png is False and config.train.max_grad_norm == 2
    # an option equal to its default is still given (explicit options win over presets)
    assert given.typed == {
        "task": "--task",
        "data_dir": "--data_dir",
        "png": "--no-png",
        "train.max_grad_norm": "--max-grad-norm",
        "train.lr": "--lr",
    }
    assert given.within() == {"task", "data_dir", "png"} and given.within("train") == {"max_grad_norm", "lr"}
    assert "train.lr" in given and "model" not in given
    assert model_arguments(config) == {"device": None, "dtype": None, "prompt_format": "paper"}


def test_list_options_take_several_values_and_keep_their_type():
    @dataclass
    class Lists:
        alphas: list[float] = field(default_factory=lambda: [0.0, 1.0])
        """Alphas."""
        at: list[int] = field(default_factory=list)
        """Steps."""

    config, given = parse(Lists, ["--alphas", "0", "0.5", "--at", "3", "300"])
    assert config.alphas == [0.0, 0.5] and config.at == [3, 300] and given.within() == {"alphas", "at"}
    assert parse(Lists, [])[0].alphas == [0.0, 1.0]


def test_parse_refuses_abbreviations_and_unknown_options(capsys):
    with pytest.raises(SystemExit):
        parse(Script, ["--task", "t", "--n-ev", "3"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_help_shows_each_shared_docstring():
    code = (
        "from headsup_lens.options import ModelOptions, parse\n"
        "from dataclasses import dataclass\n"
        "@dataclass(frozen=True)\n"
        "class X(ModelOptions):\n"
        "    k: int = 1\n"
        "parse(X, ['--help'], prog='x')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    text = " ".join(out.split())
    assert "--prompt-format" in text and "chat-template" in text and ".gguf" in text and "--device" in text


def test_option_strings_cover_nested_fields_and_the_library_spellings():
    config = Script(task="t")
    names = option_strings(config, Given({"train.lr": "--lr"}))
    assert names["n_eval"] == "--n-eval" and names["lr"] == "--lr" and names["max_grad_norm"] == "--max-grad-norm"
    assert "out_dir" not in names  # the command has no --out


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("n_eval must be >= 1, got 0", "--n-eval must be >= 1, got 0"),
        ("task must be a Task", "--task must be a Task"),
        ("unknown task 'n_eval'", "unknown task 'n_eval'"),  # prose and quoted values stay
        ("the task of max_grad_norm", "the task of --max-grad-norm"),
        ("point HEADSUP_DATA_DIR (or data_dir=...) at a folder", "point HEADSUP_DATA_DIR (or --data-dir) at a folder"),
        ("the data_dir argument /tmp/data_dir does not exist", "--data-dir /tmp/data_dir does not exist"),
        ("soft_steps must be >= 1", "soft_steps must be >= 1"),  # not an option of this command
        ("use --n-eval or --max-grad-norm", "use --n-eval or --max-grad-norm"),  # already an option
        ("start afresh (resume=False; CLI: --fresh)", "start afresh (--fresh)"),
    ],
)
def test_name_options(message, expected):
    assert name_options(message, Script(task="t")) == expected


def test_name_options_uses_the_spelling_typed_and_library_aliases():
    @dataclass
    class Run:
        out: str = "o"
        fresh: bool = False

    assert name_options(
        "max_grad_norm must be >= 0", Script(task="t"), Given({"train.max_grad_norm": "--max_grad_norm"})
    ) == ("--max_grad_norm must be >= 0")
    assert name_options("pass another out_dir or resume=False", Run()) == "pass another --out or --fresh"
    assert name_options("resume=True", Run()) == "resume=True"
