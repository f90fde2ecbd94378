"""The value gate: multiply each query head's output `z` by its mask value before `W_O`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypedDict

from jaxtyping import Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge import TransformerBridge
from typing_extensions import Unpack

from .._validate import check_finite, check_float, check_mask_values, check_shape, check_tensor
from ..masks import HeadMask
from ._masks import MaskLike, check_model_arg, hooked, layer_of, mask_tensor, require_hook_points, row_mask
from ._paths import GateHooks, GateSpec

Hook = tuple[str, Callable]


class ValueGateOptions(TypedDict, total=False):
    """The keyword options of `value_gate` (and of `value_gate_hooks`, which takes them one by one)."""

    alpha: float
    """Scale of the heads with mask 0, in [0, 1] (default 0.0: removed)."""
    mlp: Float[Tensor, " n_layers"] | Float[Tensor, "batch n_layers"] | None
    """A gate on each layer's MLP output (appendix C.3.3; default: a `HeadMask`'s own, else none)."""
    mean: Float[Tensor, "*mean_shape"] | None
    """`[n_layers, n_heads, d_head]`, e.g. `mean_z` over a reference set: mean ablation (default None: zero)."""


def value_gate_hooks(
    model: TransformerBridge,
    mask: MaskLike,
    alpha: float = 0.0,
    mlp: Float[Tensor, " n_layers"] | Float[Tensor, "batch n_layers"] | None = None,
    mean: Float[Tensor, "*mean_shape"] | None = None,  # [n_layers, n_heads, d_head], checked with a clear error
) -> GateHooks:
    """Forward hooks for `model.hooks(fwd_hooks=...)` implementing `value_gate` (see there); the list
    also carries the gate as tensors (`GateHooks.spec`) for passes that apply it without hooks."""
    alpha = check_float("alpha", alpha, 0.0, 1.0)
    require_hook_points(model)
    values = mask_tensor(model, mask)
    if mean is not None:
        mean = check_tensor("mean", mean)
        expected = (model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head)
        if tuple(mean.shape) != expected:
            raise ValueError(f"mean must be [n_layers, n_heads, d_head] = {list(expected)}, got {list(mean.shape)}")
        check_finite("mean", mean)
    if mlp is None and isinstance(mask, HeadMask):
        mlp = mask.mlp_values
    return valid_value_gate_hooks(model, values, alpha=alpha, mlp=mlp, mean=mean)


def valid_value_gate_hooks(
    model: TransformerBridge,
    values: Tensor,
    *,
    alpha: float = 0.0,
    mlp: Tensor | None = None,
    mean: Tensor | None = None,
) -> GateHooks:
    """`value_gate_hooks` for a mask `[rows, n_layers, n_heads]` that is valid by construction (a
    training step's straight-through masks): its values are not read back from the device to be
    checked, which would cost a host synchronisation per pass."""
    mlp_hooks = _mlp_hooks(model, mlp) if mlp is not None else []
    # Heads outside the mask keep a fraction alpha: m + alpha * (1 - m) is 1 for kept and alpha for
    # removed heads, and stays differentiable in m for straight-through training.
    effective = values if alpha == 0.0 else values + alpha * (1.0 - values)

    def gate_z(z: Float[Tensor, "batch pos n_heads d_head"], hook: HookPoint) -> Tensor:
        rows = row_mask(effective, z.shape[0], hook.name)[:, layer_of(hook.name)]
        rows = rows.to(device=z.device, dtype=z.dtype)[:, None, :, None]
        if mean is None:
            return z * rows
        # Mean ablation: what a head loses is replaced by its mean output, e z + (1 - e) mean.
        fill = mean[layer_of(hook.name)].to(device=z.device, dtype=z.dtype)
        return z * rows + (1.0 - rows) * fill

    hooks = [(f"blocks.{layer}.attn.hook_z", gate_z) for layer in range(model.cfg.n_layers)] + mlp_hooks
    return GateHooks(hooks, GateSpec(heads=effective, mean=mean, mlp=_mlp_rows(mlp) if mlp is not None else None))


def _mlp_rows(mlp: Tensor) -> Tensor:
    return mlp.unsqueeze(0) if mlp.ndim == 1 else mlp


def _mlp_hooks(model: TransformerBridge, mlp: Tensor) -> list[Hook]:
    check_model_arg(model)
    n_layers = model.cfg.n_layers
    mlp = check_tensor("mlp", mlp)
    check_shape("mlp", mlp, "n_layers", "batch n_layers", n_layers=n_layers)
    check_mask_values("mlp", mlp)
    mlp_rows = _mlp_rows(mlp)

    def gate_mlp(out: Float[Tensor, "batch pos d_model"], hook: HookPoint) -> Tensor:
        rows = row_mask(mlp_rows, out.shape[0], hook.name)[:, layer_of(hook.name)]
        return out * rows.to(device=out.device, dtype=out.dtype)[:, None, None]

    return [(f"blocks.{layer}.hook_mlp_out", gate_mlp) for layer in range(n_layers)]


@contextmanager
def value_gate(
    model: TransformerBridge, mask: MaskLike, **options: Unpack[ValueGateOptions]
) -> Iterator[TransformerBridge]:
    """Gate heads at `blocks.L.attn.hook_z` (value side, before `W_O`), the paper's main method.

    `mask` is a `HeadMask`, a tensor `[n_layers, n_heads]`, or per-row masks
    `[batch, n_layers, n_heads]` (row i of every batch gets mask i). Heads with mask 0 are scaled
    by `alpha` (0 removes them). With `mean` (`[n_layers, n_heads, d_head]`, e.g. `mean_z` over a
    reference set), the part a head loses is replaced by its mean output instead of zero (mean
    ablation: `e z + (1 - e) mean`, `e` the head's effective gate). `mlp` optionally gates each
    layer's MLP output (appendix C.3.3).
    Works under `model.generate` with the KV cache and under backprop; the model is restored on exit,
    also after an exception. Bool and integer masks read as floats; values outside [0, 1], NaN, a shape
    that does not fit the model or `alpha` outside [0, 1] are refused before any hook is added. A
    `HeadMask` is checked against the model's structure; whether it was made for these weights is
    checked where it meets the model (`HeadMask.load(path, model)`, `HeadMask.check_model`).
    """
    with hooked(model, value_gate_hooks(model, mask, **options)):
        yield model
