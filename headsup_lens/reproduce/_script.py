"""How a reproduction script ends on an expected failure: one line on stderr, as `headsup` does.

Light (no torch): `experiments/rebuttal.py` answers `--help` without it.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..options import Given, name_options

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def one_line(error: BaseException, config: Any = None, given: Given | None = None) -> str:
    """`error` as one line, an operating-system error with its file, the library's argument names
    written as the options the user typed."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.filename:
        text = f"{error.strerror or text} ({error.filename})"
    return name_options(text, config, given)


@contextmanager
def script_errors(name: str, config: Any = None, given: Given | None = None) -> Iterator[None]:
    """Run a script's work; bad input or an operating-system error (`ValueError`, `TypeError`,
    `OSError`) ends it with `NAME: error: ...` and exit code 2, Ctrl-C or SIGTERM (a `kill`, a job
    scheduler) with `NAME: interrupted ...` and 130. Every output is written whole or not at all
    (atomic writes, output sets), so the line says so. With `config.debug` (`--debug`), the traceback."""
    debug = bool(getattr(config, "debug", False))
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stopped) if main_thread else None
    try:
        yield
    except KeyboardInterrupt:
        if debug:
            raise
        print(
            f"{name}: interrupted; files are written whole or not at all (what this run had not finished is not "
            "moved in): rerun the same command to go on from what was saved",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
    except (ValueError, TypeError, OSError) as error:
        if debug:
            raise
        print(f"{name}: error: {one_line(error, config, given)} (--debug shows the traceback)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _stopped(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
