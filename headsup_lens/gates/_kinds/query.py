"""The query gate (appendix C.3.2): a removed head attends uniformly to the positions it may see."""

from __future__ import annotations

from typing import Any

from .._registry import GateKind, Model, Tensor, register_gate


@register_gate
class QueryGate(GateKind):
    """`blocks.L.attn.hook_attn_scores` of removed heads set to 0 on every allowed key (`query_gate`).
    It depends on each input's attention scores: no weight edit reproduces it, so it is not baked,
    and the passes that stand in for the bridge (which never compute the scores) do not apply it."""

    name = "query"
    label = "query (uniform attention)"
    hook_point = "attn.hook_attn_scores"
    alpha = False
    suffix = "_query"
    stand_in = False

    @classmethod
    def head_hooks(cls, model: Model, mask: Any) -> list:
        from .._query import query_gate_hooks

        return query_gate_hooks(model, mask)

    @classmethod
    def check_model(cls, model: Model) -> None:
        from .._query import verify_query_gate

        verify_query_gate(model)

    @classmethod
    def baked(cls, values: Tensor, alpha: float) -> Tensor:
        raise ValueError(
            "this mask was trained through the query gate (a removed head attends uniformly to every "
            "position), which depends on each input's attention scores: no edit of the weights reproduces "
            "it, so it cannot be baked. Bake a value-gate mask (TrainConfig(gate='value'), the default)"
        )
