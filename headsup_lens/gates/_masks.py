"""Turning whatever the user passes as a mask into one tensor the hooks can index per layer."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..masks import HeadMask

# `[n_layers, n_heads]` shared by every row, or `[batch, n_layers, n_heads]` per row; the sizes are
# checked against the model by `mask_tensor`, which raises a ValueError that names them.
MaskLike = HeadMask | Float[Tensor, "*rows n_layers n_heads"]


def mask_tensor(model: TransformerBridge, mask: MaskLike) -> Float[Tensor, "rows n_layers n_heads"]:
    """The mask as `[rows, n_layers, n_heads]`: rows == 1 for a shared mask, == batch for per-row masks.

    Gradients are kept, so a mask tensor that requires grad can be trained through the gate.
    """
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if isinstance(mask, HeadMask):
        mask.check_model(model)
        values = mask.values
    elif isinstance(mask, Tensor):
        values = mask
    else:
        raise ValueError(f"a mask must be a HeadMask or a tensor, not {type(mask).__name__}")
    if values.ndim == 2:
        values = values.unsqueeze(0)
    if values.ndim != 3 or tuple(values.shape[1:]) != (n_layers, n_heads):
        raise ValueError(
            f"mask of shape {tuple(values.shape)} does not fit this model: expected "
            f"[n_layers, n_heads] = [{n_layers}, {n_heads}] or per-row [batch, {n_layers}, {n_heads}]"
        )
    if not values.is_floating_point():
        values = values.float()
    if not torch.isfinite(values.detach()).all():
        raise ValueError("mask contains NaN or infinite values")
    return values


def row_mask(values: Tensor, batch: int, hook_name: str) -> Tensor:
    """The mask rows for a batch of `batch`: shared masks broadcast, per-row masks must match."""
    rows = values.shape[0]
    if rows not in (1, batch):
        raise ValueError(
            f"per-row mask has {rows} rows but the batch at {hook_name} has {batch}; "
            "pass one mask per batch row or a single [n_layers, n_heads] mask"
        )
    return values


def layer_of(hook_name: str) -> int:
    """`blocks.7.attn.hook_z` -> 7."""
    return int(hook_name.split(".")[1])
