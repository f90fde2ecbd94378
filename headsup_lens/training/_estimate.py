"""How long a mask-training run will take on this machine: a few steps timed through the loop's
per-step callback (`StepTimer`)."""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence

from transformer_lens.model_bridge import TransformerBridge

from ..data import Task
from ..models._sharding import every_rank
from ._advice import TrainingAdvice
from ._config import TrainConfig
from ._loop import StepTimer
from ._train import train_masks


@every_rank
def seconds_per_step(
    model: TransformerBridge, tasks: Sequence[Task], config: TrainConfig, *, warmup_steps: int = 2, timed_steps: int = 5
) -> float:
    """Measured wall time of one training step of `config` on `model`: the median of `timed_steps`
    steps timed one by one inside a short run, after `warmup_steps` untimed ones (first calls pay
    for allocation and caches). Set-up (tokenisation), which a long run pays once, is not counted."""
    if warmup_steps < 0 or timed_steps < 1:
        raise ValueError(f"warmup_steps must be >= 0 and timed_steps >= 1, got {warmup_steps} and {timed_steps}")
    timer = StepTimer()
    with warnings.catch_warnings():
        # A run this short learns nothing by design: its advice is not for the user.
        warnings.simplefilter("ignore", TrainingAdvice)
        train_masks(
            model,
            tasks,
            config.replace(steps=warmup_steps + timed_steps, progress=False, checkpoint_every=0),
            callbacks=[timer],
        )
    return statistics.median(timer.seconds[warmup_steps:])


def format_duration(seconds: float) -> str:
    """`seconds` as "42 s", "17 min" or "3.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
