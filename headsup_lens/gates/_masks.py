"""Turning whatever the user passes as a mask into one tensor the hooks can index per layer."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

from jaxtyping import Bool, Float, Real
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._validate import check_mask_values, check_shape, check_tensor, describe
from ..masks import HeadMask

# `[n_layers, n_heads]` shared by every row, or `[batch, n_layers, n_heads]` per row; the sizes and
# values are checked against the model by `mask_tensor`, which raises a ValueError that names them.
# Bool and integer tensors are accepted as keep-masks and read as floats.
MaskLike = HeadMask | Real[Tensor, "*rows n_layers n_heads"] | Bool[Tensor, "*rows n_layers n_heads"]


# The hook points the gates use: in TransformerLens 4 `hook_z` is a legacy alias of `attn.o.hook_in`
# (the heads' outputs before W_O); `hook_attn_scores` and `hook_pattern` are the attention's own.
GATE_HOOKS = ("attn.hook_z", "attn.hook_attn_scores", "attn.hook_pattern")
_HOOKS_FOUND: weakref.WeakSet = weakref.WeakSet()


def require_hook_points(model: TransformerBridge) -> None:
    """Fail clearly, once per model, when the installed TransformerLens lacks a hook point the gates
    rely on (e.g. a legacy alias removed in a later release) instead of gating nothing."""
    if model in _HOOKS_FOUND:
        return
    hook_dict = model.hook_dict
    missing = [
        f"blocks.{layer}.{name}"
        for layer in range(model.cfg.n_layers)
        for name in GATE_HOOKS
        if f"blocks.{layer}.{name}" not in hook_dict
    ]
    if missing:
        raise ValueError(  # an installation problem, reported as one line by the CLI
            f"this TransformerLens ({version('transformer-lens')}) has no hook point {missing[0]!r} "
            f"({len(missing)} missing), which the head gates use; headsup_lens needs transformer-lens>=4.3,<5"
        )
    _HOOKS_FOUND.add(model)


def mask_tensor(model: TransformerBridge, mask: MaskLike, name: str = "mask") -> Float[Tensor, "rows n_layers n_heads"]:
    """The mask as `[rows, n_layers, n_heads]`: rows == 1 for a shared mask, == batch for per-row masks.

    Refuses (naming `name`) anything but a HeadMask or a real tensor of the model's shape with
    finite values in [0, 1]; bool and integer tensors are read as floats. A HeadMask is checked
    against the model's structure only: whether it was made for these weights is checked where a
    mask meets a model (`HeadMask.load(path, model)`, `HeadMask.check_model`), so the paper's
    "mask of another model" can be gated once accepted there. Gradients are kept, so a mask tensor
    that requires grad can be trained through the gate.
    """
    check_model_arg(model)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if isinstance(mask, HeadMask):
        mask.check_model(model, allow_other_weights=True)
        values = mask.values
    elif isinstance(mask, Tensor):
        values = check_tensor(name, mask)
    else:
        raise TypeError(f"{name} must be a HeadMask or a tensor [n_layers, n_heads], got {describe(mask)}")
    shape = check_shape(name, values, "n_layers n_heads", "batch n_layers n_heads", n_layers=n_layers, n_heads=n_heads)
    if values.ndim == 3 and values.shape[0] == 0:
        raise ValueError(f"{name} has no rows (shape {list(values.shape)}); pass at least one mask")
    check_mask_values(name, values)
    return values.unsqueeze(0) if shape == "n_layers n_heads" else values


def check_model_arg(model: Any) -> None:
    """Gates need a TransformerLens model with hook points; anything else is a TypeError."""
    if not (hasattr(model, "cfg") and hasattr(model, "hooks") and hasattr(model, "hook_dict")):
        raise TypeError(f"model must be a TransformerLens TransformerBridge, got {describe(model)}")


def row_mask(values: Tensor, batch: int, hook_name: str | None) -> Tensor:
    """The mask rows for a batch of `batch`: shared masks broadcast, per-row masks must match."""
    rows = values.shape[0]
    if rows not in (1, batch):
        raise ValueError(
            f"mask has {rows} rows (per-row masks) but the batch at {hook_name} has {batch} rows; "
            "pass one mask per batch row or a single [n_layers, n_heads] mask"
        )
    return values


def layer_of(hook_name: str | None) -> int:
    """`blocks.7.attn.hook_z` -> 7 (a hook point gets its name when the model registers it)."""
    if hook_name is None:
        raise ValueError("a gate hook ran on a hook point without a name")
    return int(hook_name.split(".")[1])


@contextlib.contextmanager
def hooked(model: TransformerBridge, hooks: list) -> Iterator[TransformerBridge]:
    """`model.hooks(fwd_hooks=hooks)`, during which `model.reset_hooks()` raises instead of silently
    removing the gate (the hooks come off when the `with` block ends)."""
    with model.hooks(fwd_hooks=hooks):
        if "reset_hooks" in vars(model):  # an outer gate guards already
            yield model
            return

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError(
                "model.reset_hooks() inside a gate would remove the gate's hooks and leave the model ungated "
                "without a word; the gate removes its hooks when its `with` block ends: reset after it"
            )

        model.reset_hooks = refuse  # an instance attribute over the method, deleted on exit
        try:
            yield model
        finally:
            del model.reset_hooks
