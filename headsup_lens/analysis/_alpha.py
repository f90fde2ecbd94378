"""Fig. 6 with the numbers a verdict needs: the instructed answer loss of every example as the heads
outside the mask are scaled by alpha, beside random head sets of the same size scaled the same way.

`alpha_grid` gives the mean loss per alpha. A lower mean at some alpha below 1 says little alone: the
lowest of eleven noisy means lies below the mean at alpha 1 by chance, and scaling *any* set of that
many heads may lower the loss (a model that repeats its instruction, say, may answer better with a
little less of everything). `alpha_control` keeps each example's loss, so a drop has a paired
bootstrap interval, and scales `n_random` random head sets (`HeadMask.shuffled`, by default matched
per layer) at the tested alpha, so the mask's drop can be compared with what the same amount of
scaling does elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import bootstrap
from transformer_lens.model_bridge import TransformerBridge

from .._progress import progress
from .._validate import check_float, check_int
from ..data import Task
from ..data._tokenize import encode_split
from ..evaluation import answer_nll_per_example
from ..masks import HeadMask, Shuffle
from ..models._sharding import every_rank

GRID = tuple(float(a) for a in np.linspace(0.0, 1.0, 11))
LEARNED, RANDOM = "outside the mask", "random set"


@dataclass
class AlphaControl:
    """The result of `alpha_control`.

    `table`: one row per (head set, draw, alpha, example): `head_set` ("outside the mask", or "random
    set" with `draw` 0, 1, ...; -1 for the mask's own set), `alpha`, `example` and `nll` (the example's
    mean instructed answer cross-entropy, nats). Every set shares the full model's loss at alpha 1,
    which is computed once and stored under the mask's set.
    """

    task: str
    alpha_test: float
    n_scaled: int
    table: pd.DataFrame

    def losses(self) -> pd.DataFrame:
        """Mean loss per alpha of the mask's set (Fig. 6's curve)."""
        own = self.table.loc[self.table.head_set == LEARNED]
        return own.groupby("alpha", as_index=False).nll.mean().rename(columns={"nll": "loss"})

    def summary(self, *, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
        """One row per head set and draw at the tested alpha: `loss_drop` (mean over examples of the loss
        at alpha 1 minus the loss at `alpha_test`; > 0: scaling lowered the loss), its paired bootstrap
        interval (`loss_drop_low`, `loss_drop_high`, percentile method), `relative_drop` (loss_drop /
        loss at 1), and
        for the mask's set the grid's lowest mean loss and the alpha where it lies."""
        full = self._at(LEARNED, -1, 1.0)
        rows = []
        for head_set, draw in self.table[["head_set", "draw"]].drop_duplicates().itertuples(index=False):
            diff = full - self._at(head_set, draw, self.alpha_test)
            interval = bootstrap(
                (diff,),
                np.mean,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method="percentile",
                rng=np.random.default_rng(seed),
            ).confidence_interval
            row = {
                "task": self.task,
                "head_set": head_set,
                "draw": int(draw),
                "n_scaled": self.n_scaled,
                "alpha_test": self.alpha_test,
                "loss_at_1": float(full.mean()),
                "loss_at_test": float(self._at(head_set, draw, self.alpha_test).mean()),
                "loss_drop": float(diff.mean()),
                "loss_drop_low": float(interval.low),
                "loss_drop_high": float(interval.high),
                "relative_drop": float(diff.mean() / full.mean()),
            }
            if head_set == LEARNED:
                curve = self.losses()
                best = curve.loc[curve.loss.idxmin()]
                row |= {"best_alpha": float(best.alpha), "best_loss": float(best.loss)}
            rows.append(row)
        return pd.DataFrame(rows)

    def _at(self, head_set: str, draw: int, alpha: float) -> np.ndarray:
        part = self.table.loc[
            (self.table.head_set == head_set) & (self.table.draw == draw) & np.isclose(self.table.alpha, alpha)
        ]
        if part.empty and np.isclose(alpha, 1.0):  # alpha 1 is the full model for every set
            return self._at(LEARNED, -1, 1.0)
        return part.sort_values("example").nll.to_numpy(dtype=float)


@every_rank
def alpha_control(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask,
    alphas: Sequence[float] = GRID,
    *,
    alpha_test: float = 0.25,
    n_random: int = 5,
    within: Shuffle = "layer",
    seed: int = 0,
    instructed: bool = True,
    split: str = "eval",
    batch_size: int = 16,
    progress_bar: bool = True,
) -> AlphaControl:
    """Per-example answer loss (instructed by default) as the heads outside `mask` are scaled by each
    of `alphas` (value gate), and as the heads outside each of `n_random` random masks of its shape
    (`mask.shuffled(seed + k, within=within)`: as many heads scaled) are scaled by `alpha_test`
    (default 0.25, inside the 0.2-0.3 where the paper found the lowest loss, fixed before looking at
    the grid so that the test does not pick the luckiest alpha)."""
    mask.check_model(model)
    check_float("alpha_test", alpha_test, 0.0, 1.0)
    check_int("n_random", n_random, minimum=0)
    check_int("seed", seed, minimum=0)
    grid = sorted({float(check_float("alpha", a, 0.0, 1.0)) for a in alphas} | {1.0, float(alpha_test)})
    encoded = encode_split(model, task, split, instructed)
    runs = [(LEARNED, -1, mask, a) for a in grid]
    runs += [(RANDOM, k, mask.shuffled(seed + k, within=within), float(alpha_test)) for k in range(n_random)]
    frames = []
    with progress(total=len(runs), desc=f"{task.name}: alpha control", unit="pass", enabled=progress_bar) as bar:
        for head_set, draw, each, alpha in runs:
            sums, counts = answer_nll_per_example(model, encoded, mask=each, alpha=alpha, batch_size=batch_size)
            nll = (sums / counts).numpy()
            frames.append(
                pd.DataFrame(
                    {"head_set": head_set, "draw": draw, "alpha": alpha, "example": range(len(nll)), "nll": nll}
                )
            )
            bar.update(1)
    n_scaled = model.cfg.n_layers * model.cfg.n_heads - mask.n_kept
    return AlphaControl(
        task=task.name, alpha_test=float(alpha_test), n_scaled=n_scaled, table=pd.concat(frames, ignore_index=True)
    )
