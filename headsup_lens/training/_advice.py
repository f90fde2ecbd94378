"""Advice on a finished mask-training run: did the mask learn anything (the time estimate of a
starting run is `_estimate.seconds_per_step`)."""

from __future__ import annotations

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
