"""What the forward passes that stand in for the bridge share (`_native`: the model's own code, every
architecture; `_fast._direct`: greedy decoding that shares rows, Llama-family decoders): the value gate as
tensors (`GateSpec`, carried by the hooks `value_gate_hooks` makes), a greedy decoding job
(`Decoding`), the switch that turns them off (`direct_path`) and when one may run (`cached_forward`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.nn.modules import module as _module
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge import TransformerBridge

from .._typecheck import checked
from ..models._bridge import raw_module as raw_module
from ._masks import row_mask

_ENABLED = [True]
_F = TypeVar("_F")
_MODULES_ATTR = "_headsup_hookable_modules"
# Every module's forward, forward-pre and backward hooks, and the process-wide ones of every module.
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_BOOKKEEPING = ("transformers", "transformer_lens")
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


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


@dataclass(frozen=True)
class ModuleHooks:
    """Plain PyTorch hooks (forward, forward-pre, backward) on the model's modules other than its hook
    points, by module name: on bridge components (`components`), on the Hugging Face modules they
    wrap and the rest of the model's tree (`modules`); `every_module` names the process-wide module
    hooks (`torch.nn.modules.module.register_module_forward_hook` and its kin) that are set."""

    components: list[str]
    modules: list[str]
    every_module: list[str]

    def elsewhere(self) -> list[str]:
        """What fires wherever a module of the model runs: hooks on its own modules and global ones."""
        return self.modules + [f"every module ({name.removeprefix('_global_')})" for name in self.every_module]


def uncaptured(hooked: list[str], what: str, instead: str) -> str:
    """The warning of a step not captured because of plain hooks on the modules `hooked`."""
    names = ", ".join(hooked[:3]) + (f" and {len(hooked) - 3} more" if len(hooked) > 3 else "")
    return f"plain PyTorch hooks on {names}: a {what} captured as a CUDA graph would run them at its capture only; {instead}"


def module_hooks(model: TransformerBridge) -> ModuleHooks:
    """The plain PyTorch hooks now on `model` (see `ModuleHooks`). The module list is walked once per
    model; the hooks are read on every call (a few hundred dictionaries at an 8B shape)."""
    found = model.__dict__.get(_MODULES_ATTR)
    if found is None:
        root = getattr(model, "original_model", None) or model
        found = [
            (name, module, getattr(module, "original_component", None) is not None)
            for name, module in root.named_modules()
            if not isinstance(module, HookPoint)
        ]
        object.__setattr__(model, _MODULES_ATTR, found)
    components, modules = [], []
    for name, module, component in found:
        if any(_own(hook) for d in _HOOK_DICTS for hook in (getattr(module, d, None) or {}).values()):
            (components if component else modules).append(name or type(module).__name__)
    every_module = [name for name in _GLOBAL_HOOKS if any(map(_own, getattr(_module, name, {}).values()))]
    return ModuleHooks(components, modules, every_module)


def _own(hook: Callable) -> bool:
    """Whether `hook` is someone's own, not the bookkeeping transformers and TransformerLens install on
    every model (transformers' output capturing, which records only when asked; the bridge's wiring)."""
    target = getattr(hook, "func", hook)  # functools.partial
    origin = getattr(target, "__module__", None) or type(target).__module__
    return origin.partition(".")[0] not in _BOOKKEEPING


_CACHES: set[str] = set()  # the attributes stand-ins are kept under (`cached_forward`)


def forget_forwards(model: TransformerBridge) -> None:
    """Drop the stand-ins kept on `model`: they hold the modules they call (or read), so after a
    module is swapped for another (LoRA adapters in or out) they must be built again."""
    for attr in _CACHES:
        model.__dict__.pop(attr, None)


def cached_forward(
    model: TransformerBridge, attr: str, build: Callable[[TransformerBridge], _F | None], *, runs_modules: bool
) -> _F | None:
    """`build(model)`, built once per model and kept on it under `attr`, when it can stand in for the
    bridge now: `build` found what it needs, no hook is attached to any hook point, the model is not
    in compatibility mode, and `direct_path(False)` has not turned the stand-ins off. Else None
    (then the bridge runs).

    Plain PyTorch hooks (`module_hooks`): one on a bridge component never runs on a stand-in (its
    components are swapped for the modules they wrap), so the bridge runs; one on a Hugging Face
    module, or a global module hook, runs where the stand-in calls that module (`runs_modules`: the
    native pass does; the direct pass computes from the weights and calls none, so it steps aside)."""
    _CACHES.add(attr)
    if not _ENABLED[0] or getattr(model, "compatibility_mode", False):
        return None
    cached = model.__dict__.get(attr)
    if cached is None:
        cached = build(model) or False
        object.__setattr__(model, attr, cached)
    if cached is False or hooks_active(model):
        return None
    hooked = module_hooks(model)
    if hooked.components or (not runs_modules and hooked.elsewhere()):
        return None
    return cached


def prompt_positions(attention_mask: Tensor | None, ids: Tensor) -> Tensor:
    """Position ids as `generate` derives them from the attention mask (left padding shifts them)."""
    if attention_mask is None:
        return torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 1)


def check_rows(spec: GateSpec | None, batch: int) -> None:
    """Per-row gates must have one row per batch row (as `row_mask` demands at the hook points)."""
    for values in (None, None) if spec is None else (spec.heads, spec.mlp):
        if values is not None:
            row_mask(values, batch, "a forward pass that stands in for the bridge")
