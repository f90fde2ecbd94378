"""The `headsup` entry point: reads the chosen command's options with the command line tyro generates
from its config (`options.CommandLine`), runs it, and turns every expected failure into one line on
stderr and a non-zero exit code (tracebacks with `--debug`).
The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import NoReturn

from .._io import FolderLock, claimed_folder
from .._progress import activity, progress_enabled, progress_off, quiet_libraries
from .._validate import check_device_available
from .._version import __version__
from ..data import ENV_VAR, default_data_dir
from ..options import CommandLine, Given, UsageError, name_options
from ._registry import (
    COMMANDS,
    LAZY,
    RECORDED_RECIPES,
    SIGNATURES,
    WARNING,
    Interrupted,
    check_out_dir,
    check_shard_launch,
    run_recipe,
)

DESCRIPTION = "Attention-head masks and functional pathways (Heads up!, ICML 2025)."
NO_PROGRESS = "--no-progress"
NO_PROGRESS_HELP = "no progress bars (quiet output for logs); accepted before or after the command"
FRESH = "--fresh"
FRESH_HELP = (
    "start afresh: what --out holds (another command's results, this command's for other options, an "
    "unfinished run) is first moved aside to <out>.old-<time>; without it such a folder is refused, and "
    "the same command with the same options continues there"
)
# Commands that never import torch: no "importing" bar for them.
_LIGHT_COMMANDS = {"tasks", "download-data"}

EXIT_BAD_INPUT = 2
EXIT_OS_ERROR = 1
EXIT_INTERRUPTED = 130


def top_help() -> str:
    """What `headsup --help` prints: the commands and their one-line help (no command module imported)."""
    names = sorted(set(LAZY) | set(COMMANDS))
    width = max(map(len, names)) + 2
    lines = [
        "usage: headsup [-h] [--version] [--debug] [--no-progress] COMMAND ...",
        "",
        DESCRIPTION,
        "",
        "commands:",
        *(f"  {name.ljust(width)}{COMMANDS[name].help if name in COMMANDS else LAZY[name][1]}" for name in names),
        "",
        "options:",
        "  -h, --help     show this help message and exit",
        "  --version      show the version and exit",
        "  --debug        show Python tracebacks instead of one-line errors",
        f"  {NO_PROGRESS}  {NO_PROGRESS_HELP}",
        "",
        "`headsup COMMAND --help` documents the options of a command.",
    ]
    return "\n".join(lines) + "\n"


def command_line(name: str) -> CommandLine:
    """The command line of `headsup NAME`, generated from its config (its module is imported)."""
    _import_command(name)
    return CommandLine(COMMANDS[name].config, f"headsup {name}", COMMANDS[name].help, _switches)


def command_lines() -> dict[str, CommandLine]:
    """Every command's command line (for tests and docs)."""
    return {name: command_line(name) for name in sorted(set(LAZY) | set(COMMANDS))}


def _switches(config: type) -> dict[str, str]:
    """The options of `headsup` around a command's config: `--no-progress`, and `--fresh` where it
    writes an --out folder."""
    return {NO_PROGRESS: NO_PROGRESS_HELP, **({FRESH: FRESH_HELP} if _claims_out(config) else {})}


def _claims_out(config: type) -> bool:
    """Whether a command with these options writes an --out folder under the one rule (`claimed_folder`)."""
    return any(f.name == "out" for f in dataclasses.fields(config)) and getattr(config, "CLAIMS_OUT", True)


def _import_command(name: str) -> None:
    if name not in COMMANDS and name in LAZY:
        importlib.import_module(f"{__package__}.{LAZY[name][0]}")
    if name not in COMMANDS:
        raise KeyError(f"command {name!r} did not register")


def _usage(prog: str, message: str) -> NoReturn:
    """A usage error: one line on stderr, exit code 2 (as argparse)."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    raise SystemExit(EXIT_BAD_INPUT)


def read_command_line(argv: Sequence[str]) -> argparse.Namespace:
    """`headsup [--debug] COMMAND OPTIONS` read: the command's name, its config (built, so validated),
    the options given and the switches; `--help` and `--version` print and exit 0, a usage error is one
    line and exit 2."""
    debug, i = False, 0
    while i < len(argv) and argv[i].startswith("-"):
        token = argv[i]
        if token == "--version":
            sys.stdout.write(f"headsup {__version__}\n")
            raise SystemExit(0)
        if token in ("-h", "--help"):
            sys.stdout.write(top_help())
            raise SystemExit(0)
        if token != "--debug":
            _usage("headsup", f"unrecognized arguments: {token}")
        debug, i = True, i + 1
    names = sorted(set(LAZY) | set(COMMANDS))
    if i == len(argv):  # a bare `headsup`: what there is to run
        width = max(map(len, names))
        helps = [f"  {n:<{width}}  {COMMANDS[n].help if n in COMMANDS else LAZY[n][1]}" for n in names]
        lines = ["choose a command:", *helps, "`headsup COMMAND --help` shows a command's options"]
        _usage("headsup", "\n".join(lines))
    name = argv[i]
    if name not in names:
        choices = ", ".join(repr(n) for n in names)
        _usage("headsup", f"argument COMMAND: invalid choice: {name!r} (choose from {choices})")
    try:
        config, given_options, switches, _ = command_line(name).read(argv[i + 1 :])
    except UsageError as error:
        _usage(f"headsup {name}", str(error))
    return argparse.Namespace(
        command=name, config=config, given=given_options, fresh=FRESH in switches, debug=debug, no_progress=False
    )


def one_line(error: BaseException, config: object = None, given_options: Given | None = None) -> str:
    """`error` as one line, the library's argument names written as the options of `config` the
    user typed (`options.name_options`)."""
    text = " ".join(str(error).split()) or type(error).__name__
    return name_options(text, config, given_options)


def _output_lock(name: str, config) -> contextlib.AbstractContextManager:
    """The lock of the command's output folder (one writer per folder; under torchrun rank 0 holds it)."""
    action = getattr(config, "action", config)  # `organism train` nests its options
    if getattr(type(action), "LOCKS_OUT_ITSELF", False):  # it checks --out before taking the lock (bake)
        return contextlib.nullcontext()
    out = getattr(action, "out", None)
    if name == "download-data" and not config.dry_run and out is None:
        out = os.environ.get(ENV_VAR) or default_data_dir()
    if out is None or (name == "download-data" and config.dry_run) or os.environ.get("RANK", "0") != "0":
        return contextlib.nullcontext()

    return FolderLock(check_out_dir(out), "--out")


def _other_rank() -> bool:
    """True in the processes of ranks 1, 2, ... under `torchrun` (WORLD_SIZE > 1): only rank 0 speaks."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and int(os.environ.get("RANK", "0") or 0) > 0


def main(argv: list[str] | None = None) -> int:
    """Run `headsup ARGV` (default: `sys.argv[1:]`) and return the exit code: 0 on success, 2 for bad
    input, 1 for an operating-system error, 130 for an interruption (one line on stderr; `--debug`
    shows the traceback).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # One switch for every bar of the run, wherever it is written (also after nested commands such
    # as `organism train`, whose parsers do not list it).
    # HEADSUP_PROGRESS=0 / TQDM_DISABLE=1 silence the libraries' bars too; in a log (stderr not a
    # terminal) those are hidden as well: they redraw, and ours write whole lines there.
    quiet = NO_PROGRESS in argv or not progress_enabled()
    argv = [a for a in argv if a != NO_PROGRESS]
    with progress_off() if quiet else quiet_libraries(), plain_warnings():
        return _main(argv)


@contextlib.contextmanager
def plain_warnings() -> Iterator[None]:
    """Warnings as one line each, `headsup: warning: MESSAGE`: the Python line that raised one (the
    console script's `sys.exit(main())`, for the library's warnings) means nothing to a command's user.
    Which warnings show is left to the filters (`-W`, `PYTHONWARNINGS`)."""
    previous = warnings.formatwarning
    warnings.formatwarning = _one_line
    try:
        yield
    finally:
        warnings.formatwarning = previous


def _one_line(message, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    ours = category is UserWarning or category.__module__.split(".")[0] == __name__.split(".")[0]
    return f"{WARNING}{' '.join(str(message).split())}{'' if ours else f' ({category.__name__})'}\n"


def _main(argv: list[str]) -> int:
    args = read_command_line(argv)
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and threading.current_thread() is threading.main_thread():
        # torchrun stops the other ranks with SIGTERM when one ends early: leave as an interruption
        # does (files written whole or not at all, the folder's lock released), not mid-write.
        previous = signal.signal(signal.SIGTERM, _stopped)
        try:
            return _ranked(args)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _ranked(args)


def _ranked(args: argparse.Namespace) -> int:
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
            return _run(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    name, config = args.command, args.config
    options = args.given  # which options the command line set: presets apply first, these win
    try:
        _check_before_imports(name, config, options)
        with _output_lock(name, config), _claimed_output_folder(name, config, options, args.fresh):
            _import_torch(name)
            code = COMMANDS[name].run(config, options)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"headsup {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Interrupted as error:
        if args.debug:
            raise
        print(f"headsup {name}: {one_line(error, config, options)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, TypeError) as error:
        if args.debug:
            raise
        print(
            f"headsup {name}: error: {one_line(error, config, options)} (--debug shows the traceback)", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    except RuntimeError as error:
        if args.debug or not _rank_lost(error):
            raise
        cause = re.sub(r"^\[[^\]]*\] ", "", one_line(error))[:160]
        print(
            f"headsup {name}: error: another rank of the torchrun job stopped ({cause}); files are written whole "
            "or not at all: rerun the same command to go on from what was saved",
            file=sys.stderr,
        )
        return EXIT_OS_ERROR
    except OSError as error:
        if args.debug:
            raise
        where = f" ({error.filename})" if getattr(error, "filename", None) else ""
        reason = error.strerror or one_line(error, config, options)
        print(f"headsup {name}: error: {reason}{where} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_OS_ERROR
    return int(code or 0)


def _stopped(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _rank_lost(error: RuntimeError) -> bool:
    """Whether `error` is a collective that failed because another rank of a torchrun job died or
    left (gloo: the connection to it closed; NCCL: a `DistError`, or its timeout)."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return False
    dist = sys.modules.get("torch.distributed")
    if dist is not None and isinstance(error, getattr(dist, "DistError", ())):
        return True
    text = str(error)
    return "gloo" in text or "NCCL" in text or "Connection closed by peer" in text


def _check_before_imports(name: str, config: object, given_options: Given) -> None:
    """Every name and option that can be checked without torch, before anything is imported or
    written: its output folder (writable), its tasks (`--task`: an unknown name or a bad task file),
    the command's own checks (`Command.check`: files it reads, options that do not go together), its
    model name (`check_model_name`), its device (`--device cuda` on a machine without CUDA) and its
    launch (`--shard` outside torchrun). A refusal comes at once, not after seconds of imports."""
    action = getattr(config, "action", config)  # `organism train` nests its options
    out = getattr(action, "out", None)
    if out is not None:
        check_out_dir(out)
    names = getattr(action, "task", None)  # demo's --task (`tasks`) and the organism's are checked by their command
    if names:
        from ..data import load_task  # no torch: the task registry and readers only

        for task in [names] if isinstance(names, str) else names:
            load_task(task, getattr(action, "data_dir", None))
    check = COMMANDS[name].check
    if check is not None:
        check(action, given_options)
    model = getattr(action, "model", None)
    if isinstance(model, str):
        from ..models._builtin import check_model_name  # no torch: names and paths only

        check_model_name(model)
    check_device_available("--device", getattr(action, "device", None))
    check_shard_launch(action)


@contextlib.contextmanager
def _claimed_output_folder(name: str, config: object, given_options: Given, fresh: bool) -> Iterator[None]:
    """Apply the one rule of output folders (`_io.claimed_folder`) to the command's `--out`, under its
    lock and before any work: another command's results there, or this command's for another recipe,
    are refused (or moved aside with `--fresh`). Rank 0 alone does it under torchrun."""
    action = getattr(config, "action", config)
    out = getattr(action, "out", None)
    if out is None or not getattr(type(action), "CLAIMS_OUT", True) or os.environ.get("RANK", "0") != "0":
        yield
        return
    command = COMMANDS[name]
    recipe = (command.recipe or run_recipe)(action, given_options)
    with claimed_folder(
        check_out_dir(out),
        name,
        recipe,
        fresh=fresh,
        signatures=SIGNATURES,
        recipes=RECORDED_RECIPES,
    ) as moved:
        if moved is not None:
            print(f"moved the earlier run aside to {moved}")
        yield


def _import_torch(name: str) -> None:
    """Import torch and TransformerLens under a progress bar: on a busy machine the import alone can
    take tens of seconds before a command prints anything."""
    if name in _LIGHT_COMMANDS or "transformer_lens.model_bridge" in sys.modules:
        return
    with activity("starting: importing torch and TransformerLens"):
        importlib.import_module("transformer_lens.model_bridge")
