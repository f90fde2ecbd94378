"""The value gate (the paper's method): each query head's output `z` times its mask value, before `W_O`."""

from __future__ import annotations

from typing import Any

from .._registry import GateKind, Model, Tensor, register_gate


@register_gate
class ValueGate(GateKind):
    """`blocks.L.attn.hook_z` scaled per head: a removed head keeps `alpha` of its output, or its
    mean output with mean ablation (`value_gate`). A per-head scale of `W_O`'s input, so the passes
    that stand in for the bridge apply it, and it bakes into the output projections' weights."""

    name = "value"
    label = "value (hook_z)"
    hook_point = "attn.hook_z"
    alpha = True
    suffix = ""
    stand_in = True

    @classmethod
    def hooks(cls, model: Model, mask: Any, **options: Any) -> list:
        from .._value import value_gate_hooks

        return value_gate_hooks(model, mask, **options)  # alpha, mlp and mean: its spec carries them

    @classmethod
    def training_hooks(cls, model: Model, mask: Tensor, mlp: Tensor) -> list:
        from .._value import valid_value_gate_hooks

        return valid_value_gate_hooks(model, mask, mlp=mlp)

    @classmethod
    def check_model(cls, model: Model) -> None:
        from .._masks import require_hook_points

        require_hook_points(model)

    @classmethod
    def baked(cls, values: Tensor, alpha: float) -> Tensor:
        # The effective gate, m + alpha (1 - m): 1 for kept heads, alpha for removed ones.
        return values + alpha * (1.0 - values)
