"""A random-mask control with power: many random masks of the learned mask's shape, each evaluated as
the learned mask is, so that the learned mask's score can be placed in their distribution.

The paper's control is one shuffled mask (`HeadMask.shuffled`, the "random mask" setting of
`evaluate`). One draw says little: removing a third of a small model's heads at random often breaks it
outright, and a single draw cannot say how often. `random_mask_control` draws `n_draws` masks (by
default keeping each layer's count of kept heads, `within="layer"`), evaluates the learned mask and
every draw on the same examples with the same options, and `RandomMaskControl.summary` reports the
draws' mean and central 95% range beside the learned mask's score and its rank among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._progress import progress
from .._validate import check_int
from ..data import Task
from ..masks import HeadMask, Shuffle
from ..models._sharding import every_rank
from ._config import EvalConfig
from ._evaluate import evaluate
from ._fluency import fluent_random_masks

LEARNED = "learned"
RANDOM = "random"
LOWER_IS_BETTER = frozenset({"answer_nll", "perplexity", "echo", "empty"})
SUMMARY_METRICS = ("accuracy", "strict", "answer_nll")


class TooFewFluentDraws(ValueError):
    """The fluency filter kept fewer random masks than asked for within its tries: by the plan's rule
    the control is not run (`ControlsPlan`)."""


@dataclass
class RandomMaskControl:
    """The result of `random_mask_control`.

    `draws`: one row per mask, the learned one first (`mask` "learned", `draw` -1) then the random
    ones (`mask` "random", `draw` 0, 1, ..., `seed` the shuffle's seed), with the score columns of the
    "masked" row of `evaluate` (accuracy, strict, answer_nll, echo, empty, n_kept, ...). `generations`:
    every output behind them, `evaluate`'s generation columns plus `mask` and `draw`.
    """

    task: str
    within: str
    draws: pd.DataFrame
    generations: pd.DataFrame

    @property
    def n_draws(self) -> int:
        """How many random masks were evaluated."""
        return int((self.draws["mask"] == RANDOM).sum())

    def summary(self, metrics: tuple[str, ...] = SUMMARY_METRICS) -> pd.DataFrame:
        """One row per metric: the learned mask's value, the random draws' mean and central 95% range
        (`random_low`, `random_high`: the 2.5th and 97.5th percentiles), `at_least` (random draws that
        score as well as the learned mask or better: higher, or lower for a loss), `learned_rank` (1 + the
        draws strictly better) and `p` = (1 + at_least) / (1 + n_draws), the permutation test's
        one-sided p-value that a random mask of this shape does as well."""
        learned = self.draws.loc[self.draws["mask"] == LEARNED].iloc[0]
        random = self.draws.loc[self.draws["mask"] == RANDOM]
        rows = []
        for metric in metrics:
            values = random[metric].to_numpy(dtype=float)
            mine = float(learned[metric])
            sign = -1.0 if metric in LOWER_IS_BETTER else 1.0  # "better" is larger after the sign
            at_least = int((sign * values >= sign * mine).sum())
            better = int((sign * values > sign * mine).sum())
            rows.append(
                {
                    "task": self.task,
                    "metric": metric,
                    "learned": mine,
                    "random_mean": float(values.mean()),
                    "random_low": float(np.percentile(values, 2.5)),
                    "random_high": float(np.percentile(values, 97.5)),
                    "n_draws": len(values),
                    "within": self.within,
                    "at_least": at_least,
                    "learned_rank": 1 + better,
                    "p": (1 + at_least) / (1 + len(values)),
                }
            )
        return pd.DataFrame(rows)


@every_rank
def random_mask_control(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask | Tensor,
    config: EvalConfig = EvalConfig(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    n_draws: int = 20,
    within: Shuffle = "layer",
    seed: int = 0,
) -> RandomMaskControl:
    """Evaluate `mask` and `n_draws` random masks of its shape on `task` (no instruction, the
    "masked" setting of `evaluate` with `config`'s split, gate, token budget and batch size).

    Draw k is `mask.shuffled(seed + k, within=within)`: `within="layer"` keeps each layer's number
    of kept heads (a control matched to where the mask removes heads), `"model"` only the total
    (the paper's shuffled mask). The learned mask runs first, on the same prompts."""
    check_int("n_draws", n_draws, minimum=1)
    check_int("seed", seed, minimum=0)
    if not isinstance(mask, HeadMask):
        mask = HeadMask(mask.detach().float().cpu())
    draws = [(seed + k, mask.shuffled(seed + k, within=within), {}) for k in range(n_draws)]
    return _evaluate_draws(model, task, mask, draws, config, within=within)


@every_rank
def fluent_random_mask_control(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask,
    neutral: Sequence[tuple[list[int], list[int]]],
    config: EvalConfig = EvalConfig(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    n_draws: int = 20,
    pool: float = 2.0,
    tolerance: float = 0.10,
    max_candidates: int = 10,
    seed: int = 0,
) -> RandomMaskControl:
    """`random_mask_control` with random masks that keep the model as fluent as `mask` on the neutral
    text `neutral` (`fluent_random_masks`: rows of `neutral_rows`): `within="fluent"`, and every row
    carries its `neutral_loss` (the learned mask's too). Fewer than `n_draws` kept masks (the filter
    refused the rest within `max_candidates` tries each) is a `TooFewFluentDraws` that says how many."""
    found = fluent_random_masks(
        model, mask, neutral, n_draws=n_draws, pool=pool, tolerance=tolerance, max_candidates=max_candidates, seed=seed
    )
    if len(found.masks) < n_draws:
        raise TooFewFluentDraws(
            f"{task.name}: {len(found.masks)} of {n_draws} random masks kept the neutral loss within "
            f"{tolerance:.0%} of the learned mask's {found.learned_loss:.3f} in {found.tried} tries"
        )
    draws = [(seed, draw, {"neutral_loss": loss}) for draw, loss in zip(found.masks, found.losses)]
    return _evaluate_draws(
        model, task, mask, draws, config, within="fluent", learned={"neutral_loss": found.learned_loss}
    )


def _evaluate_draws(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask,
    draws: Sequence[tuple[int, HeadMask, dict]],
    config: EvalConfig,
    *,
    within: str,
    learned: dict | None = None,
) -> RandomMaskControl:
    """The learned mask, then every draw (seed, mask, extra columns), as the "masked" row of `evaluate`."""
    one = replace(config, settings=("masked",), progress=False)
    masks = [(LEARNED, -1, None, mask, learned or {})] + [
        (RANDOM, k, draw_seed, each, extra) for k, (draw_seed, each, extra) in enumerate(draws)
    ]
    rows, texts = [], []
    with progress(total=len(masks), desc=f"{task.name}: random masks", unit="mask", enabled=config.progress) as bar:
        for kind, draw, draw_seed, each, extra in masks:
            result = evaluate(model, task, each, one)
            row = result.table.loc[result.table.setting == "masked"].iloc[0].to_dict()
            rows.append({"mask": kind, "draw": draw, "seed": draw_seed} | row | extra)
            texts.append(result.generations.assign(mask=kind, draw=draw))
            bar.update(1)
    table = pd.DataFrame(rows).drop(columns=["setting"])
    generations = pd.concat(texts, ignore_index=True).drop(columns=["setting"])
    return RandomMaskControl(task=task.name, within=within, draws=table, generations=generations)
