"""Single-head ablation: remove one head at a time and measure the uninstructed answer loss."""

from __future__ import annotations

import torch

from ._base import MethodContext, mask_losses, register_method


@register_method("single_ablation", "loss drop when each head alone is ablated (one batched row per head)")
def single_ablation(context: MethodContext) -> tuple[torch.Tensor, dict]:
    """Score = loss(full model) - loss(head ablated): how much removing this head alone lowers the
    uninstructed answer loss. Row 0 is the full model, row i + 1 removes head i (per-row masks, so
    every head is one row of the same batched passes), under the context's ablation."""
    model = context.model
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    masks = torch.ones(1 + n_layers * n_heads, n_layers * n_heads)
    masks[1:].fill_diagonal_(0.0)
    masks = masks.view(-1, n_layers, n_heads)
    losses = mask_losses(model, context.batch, masks, max_rows=context.max_rows, **context.gate_options())
    scores = (losses[0] - losses[1:]).view(n_layers, n_heads)
    return scores, {**context.ablation_settings(), "full_loss": float(losses[0])}
