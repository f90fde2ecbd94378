"""Advice on a finished or starting mask-training run: did the mask learn anything, and how long
will the run take on this machine."""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

# A mask that keeps at least this share of the heads has removed (almost) nothing.
NEARLY_ALL_KEPT = 0.98
# A loss that changed by less than this fraction between the first and the last tenth of the steps
# has barely moved.
LOSS_BARELY_MOVED = 0.05


class TrainingAdvice(UserWarning):
    """A finished training run that looks like it learned nothing (see `run_problems`)."""


@dataclass(frozen=True)
class RunProblem:
    """One thing that looks wrong with a task's training run."""

    task: str
    problem: str


def run_problems(history: pd.DataFrame, n_total: int) -> list[RunProblem]:
    """Problems visible in a training history (columns step, task, loss, n_kept; one row per step
    and task): the final mask keeps (nearly) every head, or the loss barely moved."""
    problems = []
    for task, rows in history.groupby("task", sort=False):
        rows = rows.sort_values("step")
        kept = int(rows.n_kept.iloc[-1])
        if kept >= NEARLY_ALL_KEPT * n_total:
            problems.append(RunProblem(str(task), f"kept {kept}/{n_total} heads: the mask removed (almost) nothing"))
        tenth = max(1, len(rows) // 10)
        first, last = float(rows.loss.iloc[:tenth].mean()), float(rows.loss.iloc[-tenth:].mean())
        if len(rows) >= 2 and abs(first - last) < LOSS_BARELY_MOVED * max(abs(first), 1e-8):
            problems.append(
                RunProblem(str(task), f"the answer loss barely moved ({first:.3f} -> {last:.3f} nats/token)")
            )
    return problems


def seconds_per_step(model, tasks: Sequence, config, *, warmup_steps: int = 2, timed_steps: int = 5) -> float:
    """Measured wall time of one training step of `config` on `model`: the median of `timed_steps`
    steps timed one by one inside a short run, after `warmup_steps` untimed ones (first calls pay
    for allocation and caches). Set-up (tokenisation), which a long run pays once, is not counted."""
    from ._train import _train

    times: list[float] = []
    with warnings.catch_warnings():
        # A run this short learns nothing by design: its advice is not for the user.
        warnings.simplefilter("ignore", TrainingAdvice)
        _train(
            model,
            list(tasks),
            config.replace(steps=warmup_steps + timed_steps, progress=False, checkpoint_every=0),
            out_dir=None,
            resume=False,
            single=False,
            step_times=times,
        )
    return statistics.median(times[warmup_steps:])


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
