"""The paper's learned mask and the random baseline as head rankings."""

from __future__ import annotations

import torch
from torch import Tensor

from ..._validate import describe
from ...masks import HeadMask
from ...training import TrainConfig, train_mask
from ._base import MethodContext, register_method


@register_method("learned_mask", "the paper's mask: heads by ascending weight sigmoid(M) (given, or trained here)")
def learned_mask(context: MethodContext, mask: HeadMask | None = None, config=None) -> tuple[Tensor, dict]:
    """Score = 1 − sigmoid(M): the paper's removal order (`HeadMask.removal_order`). With `mask`, its
    weights (cost: nothing; where it was trained is the caller's to say); else a mask is trained
    here with `train_mask(model, task, config)` (default `TrainConfig()`, the paper's schedule) on
    the task's whole training split, and its training time is the cost."""
    if mask is None:
        config = config or TrainConfig()
        mask = train_mask(context.model, context.task, config.replace(progress=False)).mask
        settings = {"source": "trained", **config.recipe()}
    else:
        if not isinstance(mask, HeadMask):
            raise TypeError(f"mask must be a HeadMask, got {describe(mask)}")
        mask.check_model(context.model)
        settings = {"source": "given", **{k: v for k, v in mask.metadata.items() if isinstance(v, (int, float, str))}}
    return 1.0 - mask.weights, {**settings, "n_kept": mask.n_kept}


@register_method("random", "a seeded random order (the baseline)")
def random(context: MethodContext) -> tuple[Tensor, dict]:
    """Uniform random scores from `seed`: a random removal order."""
    generator = torch.Generator().manual_seed(context.seed)
    model = context.model
    return torch.rand(model.cfg.n_layers, model.cfg.n_heads, generator=generator), {"seed": context.seed}
