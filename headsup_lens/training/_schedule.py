"""The learning-rate schedule every trainer uses (mask training, the organism, fine-tuning), and the
check that a recipe's numbers are finite.

Kept free of torch: the configs that describe a schedule import it, and they must stay light.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._typecheck import checked


@checked
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


@checked
def non_finite_fields(config: Any) -> list[str]:
    """The fields of a dataclass `config` whose value is a NaN or infinite float (sorted by name).

    Range checks (`lr > 0`, ...) let infinities through and compare NaN as False with a message about
    the range, not the cause; a recipe checks this first.
    """
    return sorted(
        f.name
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), float) and not math.isfinite(getattr(config, f.name))
    )


def check_ranges(config: Any, ok: dict[str, bool], allowed: dict[str, str] | None = None) -> None:
    """The one range check of a recipe's `__post_init__`: a ValueError naming every field that is NaN
    or infinite, or whose entry in `ok` is False, with its value and what is allowed (`allowed[name]`,
    default ">= 0"): `steps must be > 0, got 0; lr must be finite (not NaN or infinite), got nan`."""
    infinite = set(non_finite_fields(config))
    bad = [f"{name} must be finite (not NaN or infinite), got {getattr(config, name)}" for name in sorted(infinite)]
    bad += [
        f"{name} must be {(allowed or {}).get(name, '>= 0')}, got {getattr(config, name)!r}"
        for name, fine in ok.items()
        if not fine and name not in infinite
    ]
    if bad:
        raise ValueError(f"{type(config).__name__}: {'; '.join(bad)}")
