"""Progress bars for long phases, with one process-wide switch (the CLI's `--no-progress`).

Every phase that can take more than a few seconds shows a tqdm bar on stderr with counts and a
rate (`progress`), or, where the work has no count (a download, a conversion inside another
library), a bar whose elapsed time keeps moving (`activity`). `set_progress(False)` (or the
environment variable `HEADSUP_PROGRESS=0`) silences all of them; a bar's own `enabled=False`
silences that one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tqdm.auto import tqdm

from ._typecheck import checked

_SWITCH: list[bool | None] = [None]  # None: follow HEADSUP_PROGRESS (default on)
_HF_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"
DELAY_S = 1.0  # a bar appears once its phase has taken this long: short phases print nothing


@checked
def set_progress(enabled: bool) -> None:
    """Show (True) or hide (False) every progress bar of this process from now on, Hugging Face's
    own bars (downloads, conversions) included. `progress_off` does the same for one block."""
    _SWITCH[0] = bool(enabled)
    if not enabled:
        _hide_hugging_face_bars()


def _hide_hugging_face_bars() -> Callable[[], None]:
    """Hide Hugging Face's bars; returns what shows them again as they were."""
    previous = os.environ.get(_HF_ENV)
    os.environ[_HF_ENV] = "1"  # read when huggingface_hub is imported
    undo: list[Callable[[], None]] = []
    hub = sys.modules.get("huggingface_hub")
    if hub is not None and not hub.utils.are_progress_bars_disabled():
        hub.utils.disable_progress_bars()
        undo.append(hub.utils.enable_progress_bars)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging  # only when transformers is loaded already

        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            undo.append(hf_logging.enable_progress_bar)

    def restore() -> None:
        for step in undo:
            step()
        if previous is None:
            os.environ.pop(_HF_ENV, None)
        else:
            os.environ[_HF_ENV] = previous

    return restore


@checked
def progress_enabled() -> bool:
    """Whether progress bars are shown: `set_progress`, else `HEADSUP_PROGRESS` (0/false/no/off hide them)."""
    if _SWITCH[0] is not None:
        return _SWITCH[0]
    return os.environ.get("HEADSUP_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
@checked
def progress_off() -> Iterator[None]:
    """No progress bars inside the block, Hugging Face's included; everything is restored after it
    (the CLI's `--no-progress` and the scripts' run under it)."""
    previous = _SWITCH[0]
    _SWITCH[0] = False
    restore = _hide_hugging_face_bars()
    try:
        yield
    finally:
        _SWITCH[0] = previous
        restore()


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
                self.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        super().close()


@checked
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
    switched off (`set_progress`), and shown only once the phase has taken `delay` seconds (default
    `DELAY_S`: short phases print nothing). `tick` redraws it every so many seconds, so that its elapsed time moves
    while one unit takes long. Use it as tqdm: iterate over it, or `update(n)` and `close()`."""
    return _Bar(
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
@checked
def activity(desc: str, *, enabled: bool = True, delay: float | None = None) -> Iterator[tqdm]:
    """A bar for a phase without counts: its elapsed time is redrawn every second until the block
    ends, once the phase has taken `delay` seconds (`bar.set_postfix_str` can say what is happening)."""
    bar = progress(
        desc=desc, total=None, enabled=enabled, delay=delay, tick=1.0, bar_format="{desc}: {elapsed}{postfix}"
    )
    try:
        yield bar
    finally:
        bar.close()
