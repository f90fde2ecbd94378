"""The `headsup` entry point: builds only the chosen command's parser, runs it, and turns every
expected failure into one line on stderr and a non-zero exit code (tracebacks with `--debug`)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Sequence

from simple_parsing import ArgumentParser, DashVariant
from simple_parsing.help_formatter import SimpleHelpFormatter

from . import _registry
from ._registry import COMMANDS, LAZY, Interrupted

EXIT_BAD_INPUT = 2
EXIT_OS_ERROR = 1
EXIT_INTERRUPTED = 130

# Library argument names that reach CLI users through error messages, and the flags they mean.
_FLAG_NAMES = (
    (re.compile(r"\(([^;()]*); CLI: ([^()]*)\)"), r"(\2)"),  # "(resume=False; CLI: --fresh)" -> "(--fresh)"
    (re.compile(r"\bresume=False\b"), "--fresh"),
    (re.compile(r"\(or data_dir=\.\.\.\)"), "(or --data-dir)"),
    (re.compile(r"\bdata_dir=\.\.\."), "--data-dir"),
    (re.compile(r"\bthe data_dir argument\b"), "--data-dir"),
    (re.compile(r"\banother out_dir\b"), "another --out"),
    (re.compile(r"\bout_dir\b"), "--out"),
)


class _HelpFormatter(SimpleHelpFormatter):
    """simple-parsing's help, without a second "(default: ...)" where the text already states its
    default, and without "(default: None)" (the text says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default is None or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


class _Parser(ArgumentParser):
    """simple-parsing's parser with one option style: `--no-png` (not `--nopng`), no `--nono-...`."""

    _tidied = False

    def __init__(self, *args, **kwargs) -> None:
        # Nested sub-commands (`organism train`) are built by simple-parsing with this class: give
        # them the same style.
        kwargs.setdefault("add_option_string_dash_variants", DashVariant.DASH)
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def _preprocessing(self, args: Sequence[str] = (), namespace=None) -> None:
        super()._preprocessing(args=args, namespace=namespace)
        if not self._tidied:
            self._tidied = True
            _tidy_options(self)


def _tidy_options(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        negatives = getattr(action, "negative_option_strings", None)
        if negatives is None:
            # Scripts written for the older underscore spellings (`--n_words`) keep working; only the
            # dashed spelling is shown. (Boolean flags check their spelling, so they get no alias.)
            for option in action.option_strings:
                legacy = "--" + option[2:].replace("-", "_")
                if option.startswith("--") and legacy != option:
                    parser._option_string_actions.setdefault(legacy, action)
            continue
        if not negatives:
            continue
        renamed = []
        for option in negatives:
            parser._option_string_actions.pop(option, None)
            name = option[len("--no") :].lstrip("-")
            if name.startswith("no-"):
                continue  # a field named no_x would get --nono-x: such fields are not allowed
            renamed.append(f"--no-{name}")
        for option in renamed:
            parser._option_string_actions[option] = action
        action.option_strings = [o for o in action.option_strings if o not in negatives] + renamed
        action.negative_option_strings = renamed


def build_parser(command: str | None = "*") -> ArgumentParser:
    """The `headsup` parser. `command` picks the one sub-command whose options are built (its module
    is imported); `"*"` builds every command (tests, docs); None builds none (`headsup --help`)."""
    parser = _Parser(
        prog="headsup",
        description="Attention-head masks and functional pathways (Heads up!, ICML 2025).",
        allow_abbrev=False,
    )
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = sorted(set(LAZY) | set(COMMANDS))
    for name in names:
        wanted = command == "*" or command == name
        if wanted:
            _import_command(name)
        help_text = COMMANDS[name].help if name in COMMANDS else LAZY[name][1]
        child = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            allow_abbrev=False,
            add_option_string_dash_variants=DashVariant.DASH,  # --data-dir, as in the experiment scripts
        )
        if wanted:
            child.add_arguments(COMMANDS[name].config, dest="config")
    return parser


def command_parsers() -> dict[str, ArgumentParser]:
    """Every command's parser with its options built (for tests and docs)."""
    parser = build_parser("*")
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for child in subparsers.choices.values():
        child._preprocessing([])
    return dict(subparsers.choices)


def _import_command(name: str) -> None:
    if name not in COMMANDS and name in LAZY:
        importlib.import_module(f"{__package__}.{LAZY[name][0]}")
    if name not in COMMANDS:
        raise KeyError(f"command {name!r} did not register")


def _chosen(argv: Sequence[str]) -> str | None:
    for token in argv:
        if not token.startswith("-"):
            return token if token in LAZY or token in COMMANDS else None
    return None


def _given(argv: Sequence[str], chosen: str) -> set[str]:
    after = list(argv)[list(argv).index(chosen) + 1 :]
    return {token.split("=", 1)[0] for token in after if token.startswith("--")}


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    for pattern, flag in _FLAG_NAMES:
        text = pattern.sub(flag, text)
    return text


def _output_lock(name: str, config) -> contextlib.AbstractContextManager:
    """The lock of the command's output folder (one writer per folder; under torchrun rank 0 holds it)."""
    action = getattr(config, "action", config)  # `organism train` nests its options
    if getattr(type(action), "LOCKS_OUT_ITSELF", False):  # it checks --out before taking the lock (bake)
        return contextlib.nullcontext()
    out = getattr(action, "out", None)
    if name == "download-data" and not config.dry_run and out is None:
        from ..data import ENV_VAR, default_data_dir

        out = os.environ.get(ENV_VAR) or default_data_dir()
    if out is None or (name == "download-data" and config.dry_run) or os.environ.get("RANK", "0") != "0":
        return contextlib.nullcontext()
    from .._io import FolderLock

    return FolderLock(_registry.check_out_dir(out), "--out")


def _other_rank() -> bool:
    """True in the processes of ranks 1, 2, ... under `torchrun` (WORLD_SIZE > 1): only rank 0 speaks."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and int(os.environ.get("RANK", "0") or 0) > 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen(argv)
    args = build_parser(chosen).parse_args(argv)
    if _other_rank() and not args.debug:
        # Under torchrun every rank runs this command: the others' output and errors would repeat
        # rank 0's line for line. They still exit with the same code.
        with (
            open(os.devnull, "w") as quiet,
            contextlib.redirect_stdout(quiet),
            contextlib.redirect_stderr(quiet),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            return _run(args, argv)
    return _run(args, argv)


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    name = args.command
    _registry._GIVEN.clear()
    _registry._GIVEN.update(_given(argv, name))
    try:
        with _output_lock(name, args.config):
            code = COMMANDS[name].run(args.config)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"headsup {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Interrupted as error:
        if args.debug:
            raise
        print(f"headsup {name}: {_one_line(error)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, TypeError) as error:
        if args.debug:
            raise
        print(f"headsup {name}: error: {_one_line(error)} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        if args.debug:
            raise
        where = f" ({error.filename})" if getattr(error, "filename", None) else ""
        reason = error.strerror or _one_line(error)
        print(f"headsup {name}: error: {reason}{where} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_OS_ERROR
    return int(code or 0)
