"""The gate registry: every gate kind is one `GateKind` subclass in one file of `gates/_kinds/`,
registered under its name in `GATES`; training, evaluation, baking, the reproduction code and the
explorer look a gate up here instead of comparing names.

Importing this module, or a kind's file, imports no torch: configs check a gate's name while a
command line is parsed. A kind's work (its hooks) imports what it needs when it runs.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from .._validate import check_float

# The model (a TransformerBridge) and tensors (or None) are annotated `Any` here: this module imports no torch,
# and the run-time type checks resolve annotations from the module itself.
Model = Any
Tensor = Any


class GateKind:
    """A place where a head mask acts, and what it does there. A new kind subclasses this, sets the
    class attributes, implements `edit` (or `hooks`), and is decorated with `register_gate`.

    The mask is `[n_layers, n_heads]` (or per row `[batch, n_layers, n_heads]`), 1 = kept; masks are
    checked against the model before any hook is added."""

    name: ClassVar[str]
    """Its name in configs and on the command line (`TrainConfig(gate=name)`, `--gate name`)."""
    label: ClassVar[str]
    """How the explorer names it."""
    hook_point: ClassVar[str]
    """The hook point it edits in every block (`blocks.L.<hook_point>`)."""
    mask_shape: ClassVar[str] = "n_layers n_heads"
    """The shape of its mask (per-row masks add a leading `batch`)."""
    alpha: ClassVar[bool] = False
    """Whether `alpha` (the share of a removed head that is kept) and mean ablation apply."""
    suffix: ClassVar[str] = ""
    """What a stored mask's file name carries after the task: `<task><suffix>.safetensors` (one per
    kind: "" is the value gate's)."""
    stand_in: ClassVar[bool] = False
    """Whether the forward passes that stand in for the bridge (the native and direct passes, a
    captured training step, activation checkpointing) can apply it: they take a gate as a per-head
    scale of the heads' outputs before `W_O` (`GateSpec`); any other kind runs through the bridge."""

    def __init__(self) -> None:
        raise TypeError(f"{type(self).__name__} is a gate kind: use the class itself (GATES[name]), not an instance")

    @classmethod
    def edit(cls, activation: Tensor, gate: Tensor) -> Tensor:
        """`activation` at `blocks.L.<hook_point>` with the heads gated: `gate` is `[rows, n_heads]`
        (layer L of the mask; rows 1 or the batch), in the activation's dtype and device."""
        raise NotImplementedError(f"gate kind {cls.name!r} implements neither edit nor hooks")

    @classmethod
    def head_hooks(cls, model: Model, mask: Any) -> list:
        """Forward hooks gating the heads of `model` with `mask` (checked against the model here):
        `edit` at `blocks.L.<hook_point>` of every layer."""
        from ._masks import layer_of, mask_tensor, row_mask

        values = mask_tensor(model, mask)

        def hook(activation: Tensor, hook: Any) -> Tensor:
            rows = row_mask(values, activation.shape[0], hook.name)[:, layer_of(hook.name)]
            return cls.edit(activation, rows.to(device=activation.device, dtype=activation.dtype))

        return [(f"blocks.{layer}.{cls.hook_point}", hook) for layer in range(model.cfg.n_layers)]

    @classmethod
    def hooks(
        cls,
        model: Model,
        mask: Any,
        *,
        alpha: float = 0.0,
        mlp: Tensor = None,
        mean: Tensor = None,
    ) -> list:
        """Forward hooks for `model.hooks(fwd_hooks=...)` gating `model` with `mask` (`alpha` and
        `mean` are checked already: they come only to a kind whose `alpha` is True), plus the MLP
        gates `mlp` (`[n_layers]` or `[batch, n_layers]`; default: a `HeadMask`'s own)."""
        from ..masks import HeadMask
        from ._value import _mlp_hooks

        hooks = cls.head_hooks(model, mask)
        if mlp is None and isinstance(mask, HeadMask):
            mlp = mask.mlp_values
        return hooks + (_mlp_hooks(model, mlp) if mlp is not None else [])

    @classmethod
    def training_hooks(cls, model: Model, mask: Tensor, mlp: Tensor) -> list:
        """`hooks` for a training step's straight-through masks `[rows, n_layers, n_heads]`, which
        are valid by construction (a kind may skip reading them back to check them)."""
        return cls.hooks(model, mask, mlp=mlp)

    @classmethod
    def check_model(cls, model: Model) -> None:
        """Raise a ValueError where this gate cannot act on `model` (called before it is used)."""
        missing = [f"blocks.{l}.{cls.hook_point}" for l in range(model.cfg.n_layers)]
        missing = [name for name in missing if name not in model.hook_dict]
        if missing:
            raise ValueError(f"the {cls.name} gate needs {missing[0]}, which this architecture does not expose")

    @classmethod
    def baked(cls, values: Tensor, alpha: float) -> Tensor:
        """The scale of each head's input to `W_O` (`[n_layers, n_heads]`) that puts this gate into the
        weights (`bake`), or a ValueError where no edit of the weights reproduces it."""
        raise ValueError(f"a mask of the {cls.name} gate cannot be baked: no edit of the weights reproduces it")


_K = TypeVar("_K", bound=type[GateKind])


class _Registry(Mapping[str, "type[GateKind]"]):
    """Name -> gate kind; the built-in kinds (`gates/_kinds/`) are read on first use."""

    def __init__(self) -> None:
        self._kinds: dict[str, type[GateKind]] = {}
        self._loaded = False

    def _load(self) -> dict[str, type[GateKind]]:
        if not self._loaded:
            self._loaded = True
            # By name: the kinds import this module (a static import back would make a circle).
            kinds = importlib.import_module(f"{__package__}._kinds")
            others = sorted(m.name for m in pkgutil.iter_modules(kinds.__path__) if m.name not in kinds.BUILT_IN)
            for name in (*kinds.BUILT_IN, *others):  # the paper's first: the order menus show
                importlib.import_module(f"{kinds.__name__}.{name}")
        return self._kinds

    def __getitem__(self, name: str) -> type[GateKind]:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"GATES({', '.join(self)})"


GATES: Mapping[str, type[GateKind]] = _Registry()
"""Every gate kind by name: "value" (the paper's), "query" (App. C.3.2) and any registered since."""


def register_gate(kind: _K) -> _K:
    """Class decorator: add a `GateKind` subclass to `GATES` under its `name`; a name or a file suffix
    registered already, or a class that does not declare the attributes of a kind, is a ValueError."""
    registry = GATES._load()  # type: ignore[attr-defined]
    if not (isinstance(kind, type) and issubclass(kind, GateKind)):
        raise ValueError(f"register_gate takes a GateKind subclass, got {kind!r}")
    missing = [a for a in ("name", "label", "hook_point") if not isinstance(getattr(kind, a, None), str)]
    if missing:
        raise ValueError(f"gate kind {kind.__name__} does not declare {', '.join(missing)}")
    if kind.name in registry:
        raise ValueError(f"a gate named {kind.name!r} is registered already ({registry[kind.name].__name__})")
    if kind.mask_shape != GateKind.mask_shape:  # what mask_tensor checks and the training loop learns
        raise ValueError(f"gate kind {kind.__name__}: masks are {GateKind.mask_shape!r}, got {kind.mask_shape!r}")
    same_files = [other.name for other in registry.values() if other.suffix == kind.suffix]
    if same_files:  # two kinds' stored masks would share one file name
        raise ValueError(f"gate kind {kind.__name__}: the {same_files[0]} gate's masks have the suffix {kind.suffix!r}")
    registry[kind.name] = kind
    return kind


def unregister_gate(name: str) -> None:
    """Remove a registered gate kind (a test's own, once it is done); built-in kinds stay."""
    if name in importlib.import_module(f"{__package__}._kinds").BUILT_IN:
        raise ValueError(f"the built-in gate {name!r} cannot be removed")
    GATES._load().pop(name, None)  # type: ignore[attr-defined]


def gate_kind(name: str) -> type[GateKind]:
    """The registered kind named `name`; any other name is a ValueError that lists the registered ones."""
    kinds = GATES._load()  # type: ignore[attr-defined]
    if not isinstance(name, str) or name not in kinds:
        raise ValueError(f"gate must be one of {list(kinds)}, got {name!r}")
    return kinds[name]


def check_gate(gate: str, alpha: Any = 0.0) -> float:
    """`gate`'s name checked and `alpha` (the scale of removed heads) as a float in [0, 1], which must
    be 0 for a kind that does not scale (the query gate cuts a head's queries: there is nothing to
    scale). The one check of this pair for every entry point that takes both."""
    kind = gate_kind(gate)
    alpha = check_float("alpha", alpha, 0.0, 1.0)
    if alpha != 0.0 and not kind.alpha:
        scaling = sorted(name for name, k in GATES.items() if k.alpha)
        raise ValueError(
            f"alpha={alpha} (scaled masks) is defined for the {' and '.join(scaling)} gate only; "
            f"the {gate} gate takes alpha=0"
        )
    return alpha
