"""One option style across commands: dashes, `--no-x` negations, repeatable lists, fast --help."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headsup_lens.cli import command_parsers, main
from headsup_lens.cli._registry import LAZY
from headsup_lens.options import OptionParser


def _all_parsers():
    pending = list(command_parsers().items())
    while pending:
        name, parser = pending.pop()
        yield name, parser
        for action in parser._actions:  # nested sub-commands (`organism train`)
            choices = getattr(action, "choices", None)
            for child_name, child in choices.items() if isinstance(choices, dict) else []:
                if isinstance(child, OptionParser):
                    pending.append((f"{name} {child_name}", child))


def test_every_option_uses_dashes_and_one_negation_style():
    seen = 0
    for name, parser in _all_parsers():
        for action in parser._actions:
            for option in action.option_strings:
                seen += 1
                assert "_" not in option, f"headsup {name}: {option}"
                assert not option.startswith("--nono"), f"headsup {name}: {option}"
                if option.startswith("--no") and not option.startswith("--no-"):
                    pytest.fail(f"headsup {name}: {option} (use --no-...)")
    assert seen > 50


def test_every_lazy_command_registers_and_shares_option_names():
    parsers = command_parsers()
    assert set(LAZY) <= set(parsers)
    outs = [n for n, p in parsers.items() if any("--out" in a.option_strings for a in p._actions)]
    assert {"train", "evaluate", "sweep", "lens", "similarity", "pathways", "demo"} <= set(outs)
    for name in ("train", "evaluate", "similarity", "demo"):
        options = {o for a in parsers[name]._actions for o in a.option_strings}
        assert {"--task", "--model", "--data-dir", "--device", "--dtype"} <= options, name


def test_repeated_list_options_keep_every_value():
    parser = command_parsers()["train"]
    args = parser.parse_args(["--task", "a", "--task", "b", "c", "--out", "x"])
    assert args.config.task == ["a", "b", "c"]
    sweep = command_parsers()["sweep"]
    args = sweep.parse_args(["--prompt", "p", "--out", "o", "--order", "random", "--target", "x", "--target", "y"])
    assert args.config.target == ["x", "y"]
    demo = command_parsers()["demo"]
    assert demo.parse_args(["--task", "organism/reverse"]).config.tasks == ["organism/reverse"]
    assert demo.parse_args([]).config.tasks == ["organism/reverse", "organism/antonym", "organism/translate"]


def test_negative_flags(tmp_path):
    parsers = command_parsers()
    sweep = ["--prompt", "p", "--out", "o", "--order", "random"]
    assert parsers["sweep"].parse_args([*sweep, "--no-png"]).config.png is False
    assert parsers["sweep"].parse_args([*sweep, "--png", "false"]).config.png is False  # the older spelling
    assert (
        parsers["evaluate"]
        .parse_args(["--task", "t", "--mask", "m", "--out", "o", "--no-generate"])
        .config.evaluation.generate
        is False
    )


def test_top_level_help_imports_no_command_module():
    code = (
        "import sys; from headsup_lens.cli._main import build_parser; build_parser(None).format_help();"
        "print(sorted(m for m in sys.modules if m.startswith('headsup_lens.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['headsup_lens.cli._main', 'headsup_lens.cli._registry']"


def test_unknown_command_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["trian"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_help_states_each_default_once_and_describes_task_and_model():
    from headsup_lens.cli import command_parsers

    text = " ".join(command_parsers()["demo"].format_help().split())
    assert "(default: headsup_demo)" not in text and "(default: None)" not in text
    assert "Tasks to train masks for" in text and "smollm2" in text and ".gguf" in text
    train = " ".join(command_parsers()["train"].format_help().split())
    assert ".json/.jsonl/.csv" in train and "smollm2" in train


def test_evaluate_options_are_the_library_config():
    from headsup_lens.evaluation import EvalConfig

    argv = ["--task", "t", "--mask", "m", "--out", "o", "--settings", "masked", "random mask", "--text-metrics", "on"]
    args = command_parsers()["evaluate"].parse_args([*argv, "--no-progress", "--alpha", "0.5"])
    expected = EvalConfig(alpha=0.5, settings=("masked", "random mask"), text_metrics="on")
    assert args.config.evaluation == expected
    assert args.no_progress  # the one switch of every bar (`main` holds it off), not a field of the config


@pytest.mark.parametrize("command", sorted(LAZY))
def test_every_command_help_imports_no_torch(command):
    code = (
        "import sys; from headsup_lens.cli._main import build_parser;"
        f"build_parser({command!r}).commands[{command!r}].format_help();"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_version_and_flags_read_like_the_user_types_them(capsys):
    from headsup_lens import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"headsup {__version__}"
    text = command_parsers()["evaluate"].format_help()
    assert "--generate, --no-generate" in text and " bool" not in text and "[str]" not in text
    for section in ("Model:", "Data:", "Evaluation:"):
        assert f"\n{section}\n" in text, section
    assert "EvaluateCommand" not in text and "['config" not in text
    train = command_parsers()["train"].format_help()
    assert "\nTraining:\n" in train and "--progress" not in train  # the one --no-progress switch of every bar
