"""The optimisation loop every trainer shares (mask training, the organism, fine-tuning) and its helpers.

- `run_steps`: steps `start..steps-1` of a run, a progress bar with the step's postfix, per-step
  callbacks (`StepEnd`: timing, logging), and a checkpoint every N steps and at the end; Ctrl-C or
  SIGTERM (how a job scheduler or `kill` stops a background job) ends the run after the step under
  way, with its state saved (`on_interrupt`), then raises KeyboardInterrupt.
- `BatchSampler`: a step's batch of training indices, stateless in the step number, so that a
  resumed run draws exactly the batches of an uninterrupted one.
- `check_finite_loss`: a non-finite loss stops the run with a message that says what to try.
- `save_state` / `load_state`: a resume state written atomically, and read back with a clear error
  when it is damaged.

The learning-rate schedule is `warmup_cosine` (`_schedule.py`, free of torch).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._io import atomic_write
from .._progress import progress as progress_bar
from .._typecheck import checked


@checked
def stable_seed(*parts: Any) -> int:
    """A 63-bit seed from `parts` (joined by "/"), the same in every process and Python version
    (unlike `hash`)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class BatchSampler:
    """Batches of `n` training indices: a fresh permutation per epoch, derived from (seed, name, epoch).

    `batch(step)` is a function of the step number alone (positions `step * batch_size` to
    `(step + 1) * batch_size - 1` of the endless sequence of epochs), so a resumed run draws exactly
    the batches of an uninterrupted one. A batch larger than `n` spans several epochs.
    """

    def __init__(self, n: int, batch_size: int, seed: int, name: str) -> None:
        if n < 1 or batch_size < 1:
            raise ValueError(f"BatchSampler needs n >= 1 and batch_size >= 1, got n={n}, batch_size={batch_size}")
        self.n, self.batch_size, self.seed, self.name = n, batch_size, seed, name
        self._epoch, self._order = -1, []  # the permutation of epoch `_epoch`

    def batch(self, step: int) -> list[int]:
        """The indices of step `step`'s batch (counted from 0)."""
        out = []
        for position in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, i = divmod(position, self.n)
            if epoch != self._epoch:
                generator = torch.Generator().manual_seed(stable_seed(self.seed, self.name, "epoch", epoch))
                self._epoch, self._order = epoch, torch.randperm(self.n, generator=generator).tolist()
            out.append(self._order[i])
        return out


def check_finite_loss(loss: Tensor | float, step: int, names: Sequence[str]) -> None:
    """A ValueError when `loss` (a scalar tensor or a float) is NaN or infinite at `step` of a run on
    tasks `names`; the run stops before the optimiser step that it would poison."""
    value = float(loss.detach()) if isinstance(loss, Tensor) else float(loss)
    if not math.isfinite(value):
        raise ValueError(
            f"training loss became {value} at step {step} (tasks {list(names)}); the model may "
            "overflow in its dtype (try dtype='float32') or the learning rate is too high"
        )


def save_state(path: str | os.PathLike, state: dict) -> None:
    """Write a resume state (`torch.save`) atomically: a crash leaves the previous state intact."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(path, lambda tmp: tmp.write_bytes(buffer.getvalue()))


def load_state(path: str | os.PathLike, device: torch.device | str = "cpu") -> dict:
    """A resume state written by `save_state` (tensors only, no code: `weights_only`), its tensors
    on `device` (keep the CPU for an optimiser's state: `load_state_dict` moves what belongs on the
    parameters' device and keeps step counters on the host); a damaged file is a ValueError that says
    to start afresh."""
    try:
        return torch.load(Path(path), map_location=device, weights_only=True)
    except Exception as error:  # truncated or corrupted files raise several unpickling error types
        raise ValueError(
            f"the training checkpoint {path} cannot be read ({type(error).__name__}); it is damaged: "
            "start afresh (resume=False; CLI: --fresh)"
        ) from error


@dataclass(frozen=True)
class StepEnd:
    """What a per-step callback of `run_steps` receives after each step."""

    step: int
    """Steps done, the one just finished included (1 after the first step)."""
    seconds: float
    """Wall time of that step (the trainer's step function and, on a GPU, the device work it queued;
    not the callbacks, not the checkpoint)."""
    logs: Mapping[str, Any] = field(default_factory=dict)
    """What the step reported (the progress bar's postfix: loss, ...)."""


StepCallback = Callable[[StepEnd], None]


class StepTimer:
    """A per-step callback that keeps each step's wall time (`seconds`, in order)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, end: StepEnd) -> None:
        self.seconds.append(end.seconds)


def run_steps(
    step: Callable[[int], Mapping[str, Any]],
    *,
    steps: int,
    start: int = 0,
    checkpoint_every: int = 0,
    checkpoint: Callable[[int], None] | None = None,
    callbacks: Sequence[StepCallback] = (),
    progress: bool = True,
    desc: str | None = None,
    synchronize: Callable[[], None] | None = None,
    on_interrupt: Callable[[int], None] | None = None,
) -> None:
    """Run optimisation steps `start, ..., steps - 1`: `step(s)` performs step s (counted from 0)
    and returns what to show beside the progress bar (its postfix, e.g. `{"loss": "0.123"}`).

    After each step every callback gets a `StepEnd` (steps done, the step's wall time, its postfix),
    then `checkpoint(done)` is called when `done` is a multiple of `checkpoint_every` (0: never) or
    the last step. A run resumed from a state saved after step `start` passes that `start`: the
    bar starts there and the steps before are not run again.

    `synchronize` waits for the device's queued work (`_device.synchronizer`: a GPU's, else None).
    On a GPU a step returns once its work is queued, so when callbacks are given (they get the step's
    time) it is called before and after every step: the time is the step's work. Without callbacks
    nothing waits, and the host queues the next step while the device computes this one.

    With `on_interrupt`, Ctrl-C or SIGTERM during the run (in the main thread) lets the step under way
    finish, calls `on_interrupt(done)` (save the resume state: nothing since the last checkpoint is
    lost) unless that step was just checkpointed, and raises KeyboardInterrupt; a second signal raises at
    once. A signal the process ignores (SIGINT in a background job) stays ignored. Without it (several
    ranks, whose steps must stay in lockstep) a signal raises where it lands.
    """
    if not 0 <= start <= steps:
        raise ValueError(f"start must lie in [0, steps={steps}], got {start}")
    if checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be >= 0, got {checkpoint_every}")
    bar = progress_bar(
        range(start, steps), initial=start, total=steps, enabled=progress, desc=desc, unit="step", delay=0.0
    )
    timing = synchronize if callbacks else None
    with _stop_after_step(on_interrupt is not None) as stop_asked:
        for s in bar:
            if timing is not None:
                timing()  # the previous step's work is not this one's
            began = time.perf_counter()
            logs = step(s)
            if timing is not None:
                timing()
            seconds = time.perf_counter() - began
            bar.set_postfix(logs)
            done = s + 1
            for callback in callbacks:
                callback(StepEnd(done, seconds, logs))
            saved = False
            if checkpoint is not None and (done == steps or (checkpoint_every and done % checkpoint_every == 0)):
                checkpoint(done)
                saved = True
            if stop_asked():
                bar.close()
                if on_interrupt is not None and not saved:
                    on_interrupt(done)
                raise KeyboardInterrupt
    bar.close()


@contextlib.contextmanager
def _stop_after_step(enabled: bool) -> Iterator[Callable[[], bool]]:
    """While the block runs, SIGINT and SIGTERM are noted instead of raised (the first; a second
    raises KeyboardInterrupt at once); yields whether one came. Ignored signals stay ignored."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    asked: list[int] = []

    def note(signum: int, frame: object) -> None:
        if asked:
            raise KeyboardInterrupt
        asked.append(signum)
        print(  # noqa: T201 (a note for the user on stderr)
            "\nstopping after this step, with its state saved (once more to stop at once)", file=sys.stderr
        )

    previous = {stop: signal.getsignal(stop) for stop in (signal.SIGINT, signal.SIGTERM)}
    for stop, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(stop, note)
    try:
        yield lambda: bool(asked)
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler if handler is not None else signal.SIG_DFL)
