"""What the forward passes that stand in for the bridge share (`_native`: the model's own code, every
architecture; `_direct`: greedy decoding that shares rows, Llama-family decoders): the value gate as
tensors (`GateSpec`, carried by the hooks `value_gate_hooks` makes), a greedy decoding job
(`Decoding`), the switch that turns them off (`direct_path`) and when one may run (`cached_forward`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._typecheck import checked
from ..models._bridge import raw_module as raw_module
from ._masks import row_mask

_ENABLED = [True]
_F = TypeVar("_F")


@checked
@dataclass(frozen=True)
class GateSpec:
    """What a value gate does, as tensors (rows: 1 = shared by every batch row).

    `heads`: the effective gate `e` of every head `[rows, n_layers, n_heads]` (alpha applied), or
    None for no head gate; `mean`: the mean-ablation fill `[n_layers, n_heads, d_head]` (the head's
    output becomes `e z + (1 - e) mean`), or None; `mlp`: MLP-output gates `[rows, n_layers]`, or None.
    """

    heads: Float[Tensor, "rows n_layers n_heads"] | None = None
    mean: Float[Tensor, "n_layers n_heads d_head"] | None = None
    mlp: Float[Tensor, "rows n_layers"] | None = None


@checked
@dataclass(frozen=True)
class Decoding:
    """One greedy decoding for a forward pass that stands in for the bridge (direct or native):
    a (left-padded) prompt batch, its gate, the token budget and the stop tokens; `on_pass` is
    called after every forward pass. `answers`: reference answers to score after the prompt pass
    (from its keys and values), right-padded with -1."""

    ids: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"] | None
    spec: GateSpec | None
    max_new_tokens: int
    stop_ids: Tensor
    on_pass: Callable[[], object] | None = None
    answers: Int[Tensor, "batch answer"] | None = None


@checked
class GateHooks(list):
    """A value gate's hooks for `model.hooks(fwd_hooks=...)` that also carry its `GateSpec`, so that a
    forward pass that needs no hook point can apply the same gate directly."""

    def __init__(self, hooks: list, spec: GateSpec) -> None:
        super().__init__(hooks)
        self.spec = spec


@checked
def gate_spec(hooks: list | None) -> tuple[bool, GateSpec | None]:
    """`(True, spec)` when `hooks` are exactly a value gate (or no hooks: spec None), else `(False, None)`."""
    if isinstance(hooks, GateHooks):
        return True, hooks.spec
    return (not hooks), None


@contextlib.contextmanager
@checked
def direct_path(enabled: bool) -> Iterator[None]:
    """Turn the forward passes that stand in for the bridge (the direct and the native one) on or off
    (process-wide) inside the block; with False every loss and greedy decoding runs through the
    bridge's hook points (the reference path)."""
    previous = _ENABLED[0]
    _ENABLED[0] = bool(enabled)
    try:
        yield
    finally:
        _ENABLED[0] = previous


@checked
def hooks_active(model: TransformerBridge) -> bool:
    """Whether any hook point of the model has a hook attached (then only the bridge runs them)."""
    return any(hp._forward_hooks or hp._forward_pre_hooks or hp._backward_hooks for hp in model.hook_dict.values())


def cached_forward(model: TransformerBridge, attr: str, build: Callable[[TransformerBridge], _F | None]) -> _F | None:
    """`build(model)`, built once per model and kept on it under `attr`, when it can stand in for the
    bridge now: `build` found what it needs, no hook is attached to any hook point, the model is not
    in compatibility mode, and `direct_path(False)` has not turned the stand-ins off. Else None
    (then the bridge runs)."""
    if not _ENABLED[0] or getattr(model, "compatibility_mode", False):
        return None
    cached = model.__dict__.get(attr)
    if cached is None:
        cached = build(model) or False
        object.__setattr__(model, attr, cached)
    if cached is False or hooks_active(model):
        return None
    return cached


def check_rows(spec: GateSpec | None, batch: int) -> None:
    """Per-row gates must have one row per batch row (as `row_mask` demands at the hook points)."""
    for values in (None, None) if spec is None else (spec.heads, spec.mlp):
        if values is not None:
            row_mask(values, batch, "a forward pass that stands in for the bridge")
