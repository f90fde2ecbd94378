"""The learning-rate schedule every trainer uses (mask training, the organism, fine-tuning), and the
check that a recipe's numbers are finite.

Kept free of torch: the configs that describe a schedule import it, and they must stay light.
"""

from __future__ import annotations

import math


def warmup_cosine(step: int, *, steps: int, warmup: int, peak: float, floor: float) -> float:
    """Learning rate of optimisation step `step` (counted from 0) of a run of `steps` steps.

    A linear warm-up over the first `warmup` steps (step k gets `peak * (k + 1) / warmup`, so the
    last warm-up step reaches `peak`), then a cosine decay from `peak` at step `warmup` to `floor`
    at the last step (`steps - 1`); steps past the end stay at `floor`.
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup - 1)
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
