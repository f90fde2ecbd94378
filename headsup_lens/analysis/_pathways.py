"""Pathways across many masks (Tables 5, 6; Figs. 3, 6, 7): shared heads, Jaccard similarity,
ablation of head groups, head-weight trajectories and the alpha grid."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from scipy.stats import hypergeom
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._progress import progress
from ..evaluation import answer_loss
from ..masks import Head, HeadMask, random_jaccard
from ..models._sharding import every_rank
from ..training import load_trajectory
from ._common import check_heads
from ._config import PathwayConfig, configured

Masks = Mapping[str, HeadMask] | Sequence[HeadMask]


def named_masks(masks: Masks) -> dict[str, HeadMask]:
    """Masks keyed by name (list items get their `metadata["task"]` or their index)."""
    if isinstance(masks, Mapping):
        named = dict(masks)
    else:
        named = {}
        for i, mask in enumerate(masks):
            name = str(mask.metadata.get("task", i)) if isinstance(mask, HeadMask) else str(i)
            named[name if name not in named else f"{name} #{i}"] = mask
    if not named:
        raise ValueError("no masks given")
    bad = [name for name, m in named.items() if not isinstance(m, HeadMask)]
    if bad:
        raise ValueError(f"masks {bad} are not HeadMask objects")
    shapes = {tuple(m.values.shape) for m in named.values()}
    if len(shapes) != 1:
        raise ValueError(f"masks have different shapes {sorted(shapes)}")
    return named


@dataclass
class PathwayHeads:
    """Which heads each mask keeps. `counts[layer, head]` = number of masks keeping the head."""

    names: list[str]
    kept: Float[Tensor, "n_masks n_layers n_heads"]

    @property
    def counts(self) -> Tensor:
        """`[n_layers, n_heads]`: how many of the masks keep each head."""
        return self.kept.sum(0)

    def _rows(self, names: Sequence[str] | None) -> Tensor:
        if names is None:
            return self.kept
        unknown = [n for n in names if n not in self.names]
        if unknown or not names:
            raise ValueError(f"unknown mask names {unknown}; known: {self.names}")
        return self.kept[[self.names.index(n) for n in names]]

    def used_by_all(self, names: Sequence[str] | None = None) -> list[Head]:
        """Heads kept by every mask (of `names`, default all)."""
        return [tuple(h) for h in (self._rows(names).min(0).values > 0).nonzero().tolist()]

    def used_by_none(self, names: Sequence[str] | None = None) -> list[Head]:
        """Heads no mask (of `names`) keeps."""
        return [tuple(h) for h in (self._rows(names).max(0).values == 0).nonzero().tolist()]

    def used_by_some(self, names: Sequence[str] | None = None) -> list[Head]:
        """Heads kept by at least one but not all masks (of `names`)."""
        count = self._rows(names).sum(0)
        return [tuple(h) for h in ((count > 0) & (count < len(self._rows(names)))).nonzero().tolist()]

    def table(self) -> pd.DataFrame:
        """One row per head: layer, head, count and fraction of masks keeping it."""
        n_layers, n_heads = self.kept.shape[1:]
        counts = self.counts
        return pd.DataFrame(
            {
                "layer": np.repeat(np.arange(n_layers), n_heads),
                "head": np.tile(np.arange(n_heads), n_layers),
                "count": counts.flatten().int().numpy(),
                "fraction": (counts.flatten() / len(self.names)).numpy(),
            }
        )

    def summary(self) -> dict[str, int]:
        """Counts: `masks`, `heads` (per mask), and the heads `used_by_all`, `used_by_some`, `used_by_none`."""
        return {
            "masks": len(self.names),
            "heads": int(self.kept[0].numel()),
            "used_by_all": len(self.used_by_all()),
            "used_by_some": len(self.used_by_some()),
            "used_by_none": len(self.used_by_none()),
        }


def pathway_heads(masks: Masks) -> PathwayHeads:
    """Usage of every head across masks (e.g. one per task): counts, used by all / some / none."""
    named = named_masks(masks)
    kept = torch.stack([(m.values > 0).float() for m in named.values()])
    return PathwayHeads(names=list(named), kept=kept)


def overlap_p_value(overlap: int, size_a: int, size_b: int, n_total: int) -> float:
    """Exact one-sided p-value of an overlap: the probability that a random mask of `size_b` heads
    shares at least `overlap` heads with a fixed mask of `size_a` among `n_total` (hypergeometric)."""
    return float(hypergeom.sf(overlap - 1, n_total, size_a, size_b))


def jaccard_table(masks: Masks) -> pd.DataFrame:
    """Table 5: for every pair of masks, sizes, Jaccard, its random expectation and recall, the
    number of kept heads they share (`overlap`) and `p_value`, the exact chance of an overlap (hence
    a Jaccard) at least this large for random masks of the same sizes (`overlap_p_value`)."""
    named = named_masks(masks)
    rows = []
    names = list(named)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ma, mb = named[a], named[b]
            overlap = int(((ma.values > 0) & (mb.values > 0)).sum())
            rows.append(
                {
                    "mask_a": a,
                    "mask_b": b,
                    "size_a": ma.n_kept,
                    "size_b": mb.n_kept,
                    "jaccard": ma.jaccard(mb),
                    "expected": ma.expected_jaccard(mb),
                    "recall": ma.recall(mb),
                    "overlap": overlap,
                    "p_value": overlap_p_value(overlap, ma.n_kept, mb.n_kept, ma.n_total),
                }
            )
    return pd.DataFrame(
        rows, columns=["mask_a", "mask_b", "size_a", "size_b", "jaccard", "expected", "recall", "overlap", "p_value"]
    )


def jaccard_matrix(masks: Masks) -> pd.DataFrame:
    """Square Jaccard matrix (names on both axes, 1 on the diagonal)."""
    named = named_masks(masks)
    names = list(named)
    values = [[named[a].jaccard(named[b]) for b in names] for a in names]
    return pd.DataFrame(values, index=names, columns=names)


@every_rank
def group_ablation(
    model: TransformerBridge,
    task,
    groups: Mapping[str, Sequence[Head]],
    config: PathwayConfig | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Table 6: remove each head group from the full model and measure the (instructed) answer loss,
    against removing `n_random` random groups of the same size.

    Columns: group, size, loss (group removed), random_mean / random_std (random groups),
    original (nothing removed). Losses are `evaluation.answer_loss` (mean answer-token NLL, nats).
    `config` (a `PathwayConfig`) holds the random groups' count and seed, the prompts, gate, split and
    batch size; its fields may be given as keyword arguments instead (`n_random=2`).
    """
    config = configured(PathwayConfig, config, options, "group_ablation")
    n_random, seed, instructed, gate, split, batch_size = (
        config.n_random,
        config.seed,
        config.instructed,
        config.gate,
        config.split,
        config.batch_size,
    )
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    loss_of = functools.partial(
        answer_loss, model, task, instructed=instructed, gate=gate, split=split, batch_size=batch_size
    )
    checked = {name: check_heads(model, list(heads)) for name, heads in groups.items()}
    bar = progress(
        total=1 + sum(1 + n_random for heads in checked.values() if heads), desc="group ablation", unit="loss"
    )
    original = loss_of()
    bar.update(1)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for name, heads in checked.items():
        loss = loss_of(mask=HeadMask.from_heads(heads, shape)) if heads else original
        bar.update(1 if heads else 0)
        random_losses = []
        for _ in range(n_random if heads else 0):
            picks = torch.randperm(shape[0] * shape[1], generator=generator)[: len(heads)]
            random_heads = [divmod(int(i), shape[1]) for i in picks]
            random_losses.append(loss_of(mask=HeadMask.from_heads(random_heads, shape)))
            bar.update(1)
        rows.append(
            {
                "group": name,
                "size": len(heads),
                "loss": loss,
                "random_mean": float(np.mean(random_losses)) if random_losses else float("nan"),
                "random_std": float(np.std(random_losses)) if random_losses else float("nan"),
                "original": original,
            }
        )
    bar.close()
    return pd.DataFrame(rows)


@every_rank
def alpha_grid(
    model: TransformerBridge,
    task,
    mask: HeadMask | Tensor,
    alphas: Sequence[float] = tuple(np.linspace(0.0, 1.0, 11)),
    *,
    instructed: bool = True,
    split: str = "eval",
    batch_size: int = 16,
) -> pd.DataFrame:
    """Fig. 6: answer loss (instructed by default) as heads outside `mask` are scaled by alpha."""

    rows = []
    for alpha in alphas:
        alpha = float(alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        loss = answer_loss(
            model, task, mask=mask, alpha=alpha, instructed=instructed, split=split, batch_size=batch_size
        )
        rows.append({"alpha": alpha, "loss": loss})
    return pd.DataFrame(rows)


def weight_trajectories(
    checkpoints: Sequence[HeadMask] | Tensor | str | os.PathLike, *, task: str | None = None
) -> tuple[list[int], Float[Tensor, "steps n_layers n_heads"]]:
    """Fig. 3: the head weights sigmoid(M) over training, as (steps, weights).

    `checkpoints` is a list of `HeadMask` with logits (steps 0, 1, ...), a tensor of logits
    `[steps, n_layers, n_heads]`, or a training output folder (read with
    `training.load_trajectory`; `task` picks one task of a multi-task run).
    """
    if isinstance(checkpoints, (str, os.PathLike)):
        steps, logits = load_trajectory(Path(checkpoints), task=task)
        return steps, torch.sigmoid(logits.float())
    if isinstance(checkpoints, Tensor):
        if checkpoints.ndim != 3:
            raise ValueError(f"logit checkpoints must be [steps, n_layers, n_heads], got {tuple(checkpoints.shape)}")
        return list(range(checkpoints.shape[0])), torch.sigmoid(checkpoints.detach().float().cpu())
    checkpoints = list(checkpoints)
    if not checkpoints or not all(isinstance(c, HeadMask) for c in checkpoints):
        raise ValueError("checkpoints must be a non-empty list of HeadMask, a tensor of logits, or a run folder")
    if any(c.logits is None for c in checkpoints):
        raise ValueError("every checkpoint mask needs its logits (HeadMask.from_logits)")
    steps = [int(c.metadata.get("step", i)) for i, c in enumerate(checkpoints)]
    return steps, torch.stack([c.weights for c in checkpoints])


# How a head's trajectory relates to the pathway, from its side of `threshold` at the first and last
# checkpoint and how often it crossed in between (Fig. 3).
TRAJECTORY_KINDS = ("kept throughout", "removed throughout", "joined", "left", "joined and left", "left and came back")


def trajectory_crossings(weights: Float[Tensor, "steps n_layers n_heads"], threshold: float = 0.5) -> pd.DataFrame:
    """Fig. 3: which heads join and leave the pathway during training.

    A head is in the pathway at a checkpoint when its weight sigmoid(M) is >= `threshold` (the final
    mask's rule). One row per head: `layer`, `head`, `start` / `end` weight, `crossings` (how many
    times it changed side between consecutive checkpoints), `came_back` (it crossed and ended on
    the side where it started: joined then left, or left then came back) and `kind`, one of
    `TRAJECTORY_KINDS`. Crossings between two checkpoints are invisible: save them densely (the
    reference every 31 steps).
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.ndim != 3 or weights.shape[0] < 1:
        raise ValueError(
            f"weights must be [steps, n_layers, n_heads] with at least one step, got {tuple(weights.shape)}"
        )
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    inside = weights >= threshold
    crossings = (inside[1:] != inside[:-1]).sum(0)
    start, end = inside[0], inside[-1]
    kinds = np.empty(start.shape, dtype=object)
    kinds[(start & end & (crossings == 0)).numpy()] = "kept throughout"
    kinds[(~start & ~end & (crossings == 0)).numpy()] = "removed throughout"
    kinds[(~start & end).numpy()] = "joined"
    kinds[(start & ~end).numpy()] = "left"
    kinds[(~start & ~end & (crossings > 0)).numpy()] = "joined and left"
    kinds[(start & end & (crossings > 0)).numpy()] = "left and came back"
    n_layers, n_heads = start.shape
    return pd.DataFrame(
        {
            "layer": np.repeat(np.arange(n_layers), n_heads),
            "head": np.tile(np.arange(n_heads), n_layers),
            "start": weights[0].flatten().numpy(),
            "end": weights[-1].flatten().numpy(),
            "crossings": crossings.flatten().numpy(),
            "came_back": ((start == end) & (crossings > 0)).flatten().numpy(),
            "kind": kinds.flatten(),
        }
    )


def trajectory_table(steps: Sequence[int], weights: Float[Tensor, "steps n_layers n_heads"]) -> pd.DataFrame:
    """The weights of `weight_trajectories` in long form: one row per (step, layer, head) with its `weight`."""
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.ndim != 3 or weights.shape[0] != len(steps):
        raise ValueError(f"weights must be [len(steps), n_layers, n_heads], got {tuple(weights.shape)}")
    n_steps, n_layers, n_heads = weights.shape
    return pd.DataFrame(
        {
            "step": np.repeat(np.asarray(list(steps), dtype=np.int64), n_layers * n_heads),
            "layer": np.tile(np.repeat(np.arange(n_layers), n_heads), n_steps),
            "head": np.tile(np.arange(n_heads), n_steps * n_layers),
            "weight": weights.flatten().numpy(),
        }
    )


def crossing_counts(crossings: pd.DataFrame) -> dict[str, int]:
    """How many heads of a `trajectory_crossings` table are of each of `TRAJECTORY_KINDS`, and how
    many crossed 0.5 and came back."""
    return {
        **{kind: int((crossings["kind"] == kind).sum()) for kind in TRAJECTORY_KINDS},
        "crossed and came back": int(crossings["came_back"].sum()),
    }


def pathway_recovery(mask: HeadMask, planted: list[tuple[int, int]]) -> dict[str, int | float]:
    """How well a mask finds a known pathway: the Jaccard of the heads it **removes** and `planted`
    (`HeadMask.jaccard(..., heads="removed")`), beside the Jaccard expected for a random removal
    set of the same size (`random_jaccard`, the chance level of Table 5)."""
    removed = set(mask.removed_heads())
    truth = {tuple(h) for h in planted}
    union = removed | truth
    return {
        "n_removed": len(removed),
        "n_planted": len(truth),
        "jaccard_vs_planted": len(removed & truth) / len(union) if union else 1.0,
        "jaccard_random_expectation": random_jaccard(len(removed), len(truth), mask.n_total),
    }
