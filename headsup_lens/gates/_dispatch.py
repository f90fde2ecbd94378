"""One entry point over every gate kind, chosen by name (`GATES`), for code that lets the user pick."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from typing_extensions import Unpack

from .._names import Gate as Gate
from .._typecheck import checked
from ..masks import HeadMask
from ._masks import hooked
from ._paths import GateHooks, GateSpec
from ._registry import check_gate, gate_kind
from ._value import ValueGateOptions, _mlp_hooks, _mlp_rows


def gate_hooks(
    model: TransformerBridge,
    mask: HeadMask | Tensor | None,
    *,
    alpha: float = 0.0,
    gate: Gate = "value",
    mlp: Tensor | None = None,
    mean: Tensor | None = None,
) -> list:
    """Hooks gating `model` with `mask` (none when `mask` is None) through the gate named `gate` (a
    key of `GATES`); `alpha` and `mean` (mean ablation instead of zeroing, see `value_gate`) apply
    to a kind that scales (`GateKind.alpha`: the value gate)."""
    kind = gate_kind(gate)
    alpha = check_gate(gate, alpha)
    if mask is None:
        if mlp is None:
            return GateHooks([], GateSpec())
        return GateHooks(_mlp_hooks(model, mlp), GateSpec(mlp=_mlp_rows(mlp)))
    if mean is not None and not kind.alpha:
        raise ValueError(f"mean ablation is defined for a gate that scales heads (the value gate), not the {gate} gate")
    hooks = kind.hooks(model, mask, alpha=alpha, mlp=mlp, mean=mean)
    kind.check_model(model)
    return hooks


@checked
def training_gate_hooks(model: TransformerBridge, mask: Tensor, gate: Gate, mlp: Tensor | None) -> list:
    """`gate_hooks` for a training step's straight-through masks `[rows, n_layers, n_heads]`, valid by
    construction: the value gate does not read them back from the device to check them."""
    return gate_kind(gate).training_hooks(model, mask, mlp)


class GatedOptions(ValueGateOptions, total=False):
    """The keyword options of `gated` (and of `gate_hooks`, which takes them one by one)."""

    gate: Gate
    """Where the mask acts, a key of `GATES`: "value" (default; `alpha` and `mean` apply there only) or "query"."""


@contextlib.contextmanager
def gated(
    model: TransformerBridge, mask: HeadMask | Tensor | None, **options: Unpack[GatedOptions]
) -> Iterator[TransformerBridge]:
    """Context manager form of `gate_hooks`; a no-op for `mask=None`."""
    hooks = gate_hooks(model, mask, **options)
    if not hooks:
        yield model
        return
    with hooked(model, hooks):
        yield model
