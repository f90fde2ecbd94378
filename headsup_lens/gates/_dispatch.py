"""One entry point over both gates, chosen by name ("value" or "query"), for code that lets the user pick."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from typing_extensions import Unpack

from .._names import GATES as GATES
from .._names import Gate as Gate
from .._typecheck import checked
from .._validate import check_float, check_gate_alpha
from ..masks import HeadMask
from ._masks import hooked
from ._paths import GateHooks, GateSpec
from ._query import query_gate_hooks, verify_query_gate
from ._value import ValueGateOptions, _mlp_hooks, _mlp_rows, value_gate_hooks


@checked
def gate_hooks(
    model: TransformerBridge,
    mask: HeadMask | Tensor | None,
    *,
    alpha: float = 0.0,
    gate: Gate = "value",
    mlp: Tensor | None = None,
    mean: Tensor | None = None,
) -> list:
    """Hooks gating `model` with `mask` (none when `mask` is None) through the chosen gate; `mean`
    (value gate only) mean-ablates instead of zeroing (see `value_gate`)."""
    if mask is not None and gate == "value":
        return value_gate_hooks(model, mask, alpha=alpha, mlp=mlp, mean=mean)  # checks alpha itself
    alpha = check_float("alpha", alpha, 0.0, 1.0)
    if mask is None:
        if mlp is None:
            return GateHooks([], GateSpec())
        return GateHooks(_mlp_hooks(model, mlp), GateSpec(mlp=_mlp_rows(mlp)))
    if mean is not None:
        raise ValueError("mean ablation is defined for the value gate only")
    check_gate_alpha(gate, alpha)
    verify_query_gate(model)
    hooks = query_gate_hooks(model, mask)
    if mlp is None and isinstance(mask, HeadMask):
        mlp = mask.mlp_values
    return hooks + (_mlp_hooks(model, mlp) if mlp is not None else [])


class GatedOptions(ValueGateOptions, total=False):
    """The keyword options of `gated` (and of `gate_hooks`, which takes them one by one)."""

    gate: Gate
    """Where the mask acts: "value" (default; `alpha` and `mean` apply there only) or "query"."""


@checked
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
