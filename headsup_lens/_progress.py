"""Progress bars for long phases, with one process-wide switch (the CLI's `--no-progress`).

Every phase that can take more than a few seconds shows a tqdm bar on stderr with counts and a
rate (`progress`), or, where the work has no count (a download, a conversion inside another
library), a bar whose elapsed time keeps moving (`activity`). `progress_off()` (or the
environment variable `HEADSUP_PROGRESS=0`, or tqdm's own `TQDM_DISABLE=1`) silences all of them,
the bars of the libraries included: Hugging Face's (transformers, huggingface_hub, datasets) through
their own switches, and every other tqdm bar a library draws (transformers' "Converting and
de-quantizing GGUF tensors", gguf's writer) by being created disabled; a bar's own `enabled=False`
silences that one.

When stderr is not a terminal (a log file, a pipe, CI), a bar never redraws: it writes whole
lines, at most one every `LOG_EVERY_S` seconds while its phase runs and one when the phase ends,
and the libraries' bars (which would redraw) are hidden inside `activity` blocks.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tqdm import autonotebook
from tqdm.auto import tqdm
from tqdm.std import tqdm as plain_tqdm

_SWITCH: list[bool | None] = [None]  # None: follow HEADSUP_PROGRESS and TQDM_DISABLE (default on)
_FOREIGN_HIDDEN = [0]  # above 0: every tqdm bar not drawn by this module is created disabled
# Read by the libraries when they are imported; the calls below cover libraries already imported.
_LIBRARY_ENV = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
_OFF = ("0", "false", "no", "off")
DELAY_S = 1.0  # a bar appears once its phase has taken this long: short phases print nothing
LOG_EVERY_S = 10.0  # not a terminal: at most one line per bar this often (and one at its end)


def _hide_library_bars() -> Callable[[], None]:
    """Hide the bars of huggingface_hub, transformers and datasets (their own switches) and every
    other tqdm bar a library creates from now on; returns what shows them again as they were."""
    previous = {name: os.environ.get(name) for name in _LIBRARY_ENV}
    for name in _LIBRARY_ENV:
        os.environ[name] = "1"
    _FOREIGN_HIDDEN[0] += 1
    undo: list[Callable[[], None]] = [_show_foreign_bars]
    hub = sys.modules.get("huggingface_hub")
    if hub is not None and not hub.utils.are_progress_bars_disabled():
        hub.utils.disable_progress_bars()
        undo.append(hub.utils.enable_progress_bars)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging  # only when transformers is loaded already

        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            undo.append(hf_logging.enable_progress_bar)
    if "datasets" in sys.modules:
        datasets_utils = importlib.import_module("datasets.utils")
        if not datasets_utils.are_progress_bars_disabled():
            datasets_utils.disable_progress_bars()
            undo.append(datasets_utils.enable_progress_bars)

    def restore() -> None:
        for step in reversed(undo):
            step()
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    return restore


def _show_foreign_bars() -> None:
    _FOREIGN_HIDDEN[0] -= 1


def _follow_the_switch(init: Callable[..., None]) -> Callable[..., None]:
    """tqdm's `__init__`, creating the bars of other libraries disabled while they are hidden: a
    library that draws its own tqdm bar (transformers' GGUF reader, gguf's writer) offers no switch."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _FOREIGN_HIDDEN[0] > 0 and not isinstance(self, _Bar) and len(args) < 10:  # disable: the 11th
            kwargs["disable"] = True
        init(self, *args, **kwargs)

    return __init__


plain_tqdm.__init__ = _follow_the_switch(plain_tqdm.__init__)  # type: ignore[method-assign]


def progress_enabled() -> bool:
    """Whether progress bars are shown: not inside `progress_off`, else the environment: `HEADSUP_PROGRESS`
    (0/false/no/off hide them) and tqdm's `TQDM_DISABLE` (1/true/yes/on hide them)."""
    if _SWITCH[0] is not None:
        return _SWITCH[0]
    if os.environ.get("HEADSUP_PROGRESS", "1").strip().lower() in _OFF:
        return False
    disable = os.environ.get("TQDM_DISABLE", "").strip().lower()
    return disable in ("", *_OFF)


@contextlib.contextmanager
def progress_off() -> Iterator[None]:
    """No progress bars inside the block, Hugging Face's included; everything is restored after it
    (the CLI's `--no-progress` and the scripts' run under it)."""
    previous = _SWITCH[0]
    _SWITCH[0] = False
    restore = _hide_library_bars()
    try:
        yield
    finally:
        _SWITCH[0] = previous
        restore()


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Hide the libraries' own bars inside the block when progress is off or stderr is not a
    terminal (their redraws would fill a log line by line); as they were otherwise."""
    if progress_enabled() and _interactive():
        yield
        return
    restore = _hide_library_bars()
    try:
        yield
    finally:
        restore()


def _interactive() -> bool:
    """Whether bars may redraw in place: stderr is a terminal, or tqdm draws notebook widgets."""
    if autonotebook.tqdm is not plain_tqdm:  # tqdm.auto chose the notebook's widgets
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class _Bar(tqdm):
    """tqdm, optionally with a thread that redraws the bar every `tick` seconds (elapsed time keeps
    moving while one unit of work takes long), once `delay` seconds have passed."""

    def __init__(self, *args: Any, tick: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()
        self._ticker = None
        if tick is not None and not self.disable:
            self._ticker = threading.Thread(target=self._tick, args=(tick,), daemon=True)
            self._ticker.start()

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            if time.time() - self.start_t >= self.delay:
                with self.get_lock():
                    self.refresh(nolock=True)
                    # tqdm counts a bar as shown only after an update: without this, closing a bar
                    # that only the ticker drew would leave its line open for the next message
                    self.last_print_t = time.time()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        super().close()


class _Discard:
    """Where tqdm's own cursor moves and line ends go in a log (`_LogBar` writes whole lines)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


class _LogBar(_Bar):
    """A bar for a log: whole lines, never a redraw; one every `LOG_EVERY_S` seconds at most while
    the phase runs (none before `delay`), and the final state when it ends (`leave=True`). A stage
    named in the postfix (`set_postfix_str("writing the weights")`) is written once: the lines after
    it, while it lasts, carry the counts and times only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._shown_after = kwargs.get("delay") or 0.0
        self._final = False
        self._said: str | None = None  # the postfix of the last line written
        # tqdm draws at once when delay is 0: a log gets its first line after LOG_EVERY_S instead
        kwargs["delay"] = max(self._shown_after, 1e-6)
        kwargs["mininterval"] = max(kwargs.get("mininterval") or 0.0, LOG_EVERY_S)
        super().__init__(*args, **kwargs)
        if not self.disable:  # a disabled tqdm sets up no file
            self._out = self.fp
            self.fp = _Discard()  # type: ignore[assignment]
            self._last_line = self.start_t

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "" or (self.disable and not self._final):  # a clear: nothing to take back in a log
            return False
        now = time.time()
        if not self._final and (now - self._last_line < LOG_EVERY_S or now - self.start_t < self._shown_after):
            return False
        self._last_line = now
        if msg is None:
            said, fields = self._said, self.format_dict
            self._said = fields.get("postfix") or None
            if self._said is not None and self._said == said:
                fields["postfix"] = None  # the same stage again: not repeated
            msg = self.format_meter(**fields)
        self._out.write(msg.rstrip() + "\n")
        self._out.flush()
        return True

    # A log line is written by an update (where tqdm's count is current) or the ticker, never by a
    # postfix change: inside `for step in bar` the count shown there lags by the steps since a line.
    def set_postfix(self, ordered_dict: Any = None, refresh: bool | None = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        super().set_postfix_str(s, refresh=False)

    def close(self) -> None:
        if not self.disable and self.leave and time.time() - self.start_t >= self._shown_after:
            self._final = True
            self.last_print_t = max(self.last_print_t, self.start_t + self.delay)  # tqdm then draws the end
        super().close()


def _log_format(total: int | float | None, bar_format: str | None) -> str | None:
    """The bar's line in a log: the counts without the drawn bar (no width to fill)."""
    if bar_format is not None:
        return bar_format
    if not total:
        return "{desc}: {n_fmt}{unit} [{elapsed}, {rate_fmt}{postfix}]"
    return "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def progress(
    iterable: Iterable | None = None,
    *,
    desc: str | None = None,
    total: int | float | None = None,
    unit: str = "it",
    enabled: bool = True,
    leave: bool = True,
    delay: float | None = None,
    tick: float | None = None,
    **kwargs: Any,
) -> tqdm:
    """A tqdm bar on stderr (counts, rate, time left), hidden when `enabled` is False or progress is
    switched off (`progress_off`), and shown only once the phase has taken `delay` seconds (default
    `DELAY_S`: short phases print nothing). `tick` redraws it every so many seconds, so that its elapsed time moves
    while one unit takes long. Use it as tqdm: iterate over it, or `update(n)` and `close()`.

    When stderr is not a terminal the bar writes lines instead of redrawing (see the module's note)."""
    interactive = _interactive()
    if not interactive:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        kwargs["bar_format"] = _log_format(total, kwargs.get("bar_format"))
        tick = None if tick is None else max(tick, LOG_EVERY_S)
    return (_Bar if interactive else _LogBar)(
        iterable,
        desc=desc,
        total=total,
        unit=unit,
        leave=leave,
        delay=DELAY_S if delay is None else delay,
        tick=tick,
        disable=not (enabled and progress_enabled()),
        dynamic_ncols=True,
        file=sys.stderr,
        **kwargs,
    )


@contextlib.contextmanager
def activity(desc: str, *, enabled: bool = True, delay: float | None = None) -> Iterator[tqdm]:
    """A bar for a phase without counts: its elapsed time is redrawn every second until the block
    ends, once the phase has taken `delay` seconds (`bar.set_postfix_str` can say what is happening).
    The libraries' own bars inside the block are hidden where they would only fill a log."""
    bar = progress(
        desc=desc, total=None, enabled=enabled, delay=delay, tick=1.0, bar_format="{desc}: {elapsed}{postfix}"
    )
    try:
        with quiet_libraries():
            yield bar
    finally:
        bar.close()


if not progress_enabled():  # the environment asks for silence: the libraries imported later read it
    _hide_library_bars()
