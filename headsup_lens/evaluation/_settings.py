"""The settings of the paper's comparison table (Sec. 3.4), declared once in a registry.

A setting says how its row is run: with the instruction or the bare input, under which mask (none,
the mask evaluated, that mask shuffled, another model's mask), whether the heads outside the mask
are scaled by `alpha` instead of removed, and what it needs to run at all. A control is a setting
whose outputs are fixed by the task (no model run), scored like the others. `evaluate` builds its
rows from the registry, in the order the settings were registered (controls last).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from ..data import Task
from ._scoring import Labels, majority_label

MaskSource = Literal["none", "mask", "shuffled", "other"]
Need = Literal["instruction", "value gate", "mask", "other mask", "labels", "generation"]
NEEDS = ("instruction", "value gate", "mask", "other mask", "labels", "generation")
# A control's outputs: f(task, split, bare inputs of the split, the task's labels or None).
ControlOutputs = Callable[[Task, str, Sequence[str], Labels | None], list[str]]


@dataclass(frozen=True)
class EvalSetting:
    """One row of the comparison table and how it is run.

    `instructed`: the prompt carries the task's instruction. `mask`: `"none"` (the full model),
    `"mask"` (the mask evaluated), `"shuffled"` (that mask shuffled with `EvalConfig.random_seed`:
    as many heads kept, at random places), `"other"` (the other model's mask, `other_mask`).
    `scaled`: the heads outside the mask are scaled by `EvalConfig.alpha` instead of removed (the
    value gate only). `control`: the outputs are `control(task, split, inputs, labels)`, no model
    runs (no mask, no loss). `requires`: needs beyond those that follow from the fields (`"labels"`:
    a label task, `task_labels`). A row with a mask of the model's (`paired`) carries exact McNemar
    p-values against the `REFERENCE_SETTINGS` rows.
    """

    name: str
    instructed: bool = False
    mask: MaskSource = "none"
    scaled: bool = False
    control: ControlOutputs | None = None
    requires: tuple[Need, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.strip() or ", " in self.name:
            raise ValueError(
                f"setting name {self.name!r} must be non-empty without ', ' (which labels variants: 'masked, seed 1')"
            )
        if self.scaled and self.mask == "none":
            raise ValueError(f"setting {self.name!r}: scaled needs a mask (the heads outside it are scaled)")
        if self.control is not None and (self.instructed or self.mask != "none" or self.scaled):
            raise ValueError(f"setting {self.name!r}: a control runs no model (no instruction, mask or scaling)")
        unknown = sorted(set(self.requires) - set(NEEDS))
        if unknown:
            raise ValueError(f"setting {self.name!r}: unknown needs {unknown}; choose from {list(NEEDS)}")

    @property
    def is_control(self) -> bool:
        """Whether the setting needs no model (the echo baseline, the majority label)."""
        return self.control is not None

    @property
    def paired(self) -> bool:
        """Whether the row runs under a mask: its hits are tested against the reference rows."""
        return self.mask != "none"

    @property
    def needs(self) -> tuple[Need, ...]:
        """Everything the setting needs to run, in `NEEDS` order."""
        wanted = set(self.requires)
        wanted |= {"instruction"} if self.instructed else set()
        wanted |= {"value gate"} if self.scaled else set()
        wanted |= {"mask"} if self.mask in ("mask", "shuffled") else set()
        wanted |= {"other mask"} if self.mask == "other" else set()
        wanted |= {"generation"} if self.is_control else set()
        return tuple(need for need in NEEDS if need in wanted)


_REGISTRY: dict[str, EvalSetting] = {}
SETTINGS: Mapping[str, EvalSetting] = MappingProxyType(_REGISTRY)
"""Every registered setting by name, in registration order (read-only; add with `register_setting`)."""


def register_setting(setting: EvalSetting) -> EvalSetting:
    """Add a setting to the registry (`SETTINGS`); a name registered already is a ValueError."""
    if setting.name in _REGISTRY:
        raise ValueError(f"a setting named {setting.name!r} is registered already")
    _REGISTRY[setting.name] = setting
    return setting


def setting_of(name: str) -> EvalSetting | None:
    """The registered setting of a row name: the name itself, or for a labelled variant
    (`"masked, seed 1"`: another seed's mask in the same role) the part before the first ", "."""
    return _REGISTRY.get(name) or _REGISTRY.get(name.split(", ", 1)[0])


def _echo(task: Task, split: str, inputs: Sequence[str], labels: Labels | None) -> list[str]:
    return list(inputs)


def _majority(task: Task, split: str, inputs: Sequence[str], labels: Labels | None) -> list[str]:
    if labels is None:
        raise ValueError(f"task {task.name!r} is not a label task: it has no majority label")
    majority = majority_label(task, labels, split)
    if labels.kind == "answer":
        return [majority] * len(inputs)
    return [x.split(",")[int(majority) - 1].strip() for x in inputs]  # the item at the majority position


for _setting in (
    EvalSetting("original"),
    EvalSetting("instructed", instructed=True),
    EvalSetting("masked", mask="mask"),
    EvalSetting("random mask", mask="shuffled"),
    EvalSetting("other model's mask", mask="other"),
    EvalSetting("instructed + scaled mask", instructed=True, mask="mask", scaled=True),
    # Controls: what copying the input scores, and what always naming the most frequent label scores.
    EvalSetting("echo baseline", control=_echo),
    EvalSetting("majority label", control=_majority, requires=("labels",)),
):
    register_setting(_setting)

REFERENCE_SETTINGS = ("original", "instructed")
"""The rows every masked row is paired with (columns `p_vs_original`, `p_vs_instructed`)."""
MASK_SETTINGS = tuple(name for name, s in _REGISTRY.items() if s.paired)
"""The built-in settings run under a mask: masked, random mask, other model's mask, instructed + scaled mask."""
CONTROLS = tuple(name for name, s in _REGISTRY.items() if s.is_control)
"""The built-in controls, scored from fixed outputs: echo baseline, majority label."""
