"""The options of each analysis as one frozen config: `SweepConfig` (`removal_sweep`), `LensConfig`
(`logit_lens`), `SimilarityConfig` (`setting_similarity`), `AttentionConfig` (`attention_on_target`)
and `PathwayConfig` (`group_ablation`).

Each config is checked once, when it is built: a field out of its range is a ValueError naming the
field and its value (`top_k must be >= 0, got -1`). The functions take a config, or its fields as
keyword arguments (`removal_sweep(model, prompt, order, top_k=3)`), or both (the keywords replace the
config's fields). The command line is generated from the same configs, so the two accept the same
values. Nothing here imports torch: the command line reads these configs before any model loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .._names import Gate
from .._validate import check_float, check_int
from ..gates._registry import check_gate

_Config = TypeVar("_Config")

Split = Literal["train", "eval", "all"]
# Settings of `attention_on_target` (Table 7): without instruction, instructed, masked, both.
ATTENTION_SETTINGS: tuple[str, ...] = ("original", "instructed", "masked", "masked+instructed")
# Streams the logit lens reads (`logit_lens`) and their hooks: the block output, the attention output and
# the token embedding (the residual stream before block 0, the reference's hidden_states[0]; one row).
LENS_STREAMS: dict[str, str] = {"resid": "hook_resid_post", "attn": "hook_attn_out", "embed": "hook_resid_pre"}


def configured(cls: type[_Config], config: _Config | None, options: Mapping[str, Any], where: str) -> _Config:
    """The config a function runs with: `config` (default: `cls()`) with the keyword `options` on top,
    checked again. An option that is no field of `cls` is a TypeError naming `where`, as Python's own."""
    if config is not None and not isinstance(config, cls):
        raise TypeError(f"{where}(): config must be a {cls.__name__}, got {type(config).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    # A list where a field holds a tuple (`streams=["resid"]`) is read as that tuple.
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    options = {k: tuple(v) if isinstance(v, list) and isinstance(defaults[k], tuple) else v for k, v in options.items()}
    if config is None:
        return cls(**options)
    return dataclasses.replace(config, **options) if options else config  # type: ignore[type-var]


class _Replace:
    def replace(self, **changes: Any) -> Any:
        """A copy with `changes` applied (`dataclasses.replace`), checked again."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class SweepConfig(_Replace):
    """How `removal_sweep` removes heads and what it records at each step (Fig. 2)."""

    top_k: int = 5
    """Track the full model's top-k next tokens besides the targets (0: the targets only)."""
    max_new_tokens: int = 20
    """Greedy continuation length at each step (0: ranks and logits only)."""
    batch_size: int | None = None
    """Steps per forward pass (default: as many as fit the memory budget; 1 = sequential)."""
    memory_gb: float | None = None
    """Memory budget for a chunk of steps in GiB (default: half the free GPU memory, 2 GiB on CPU)."""
    gate: Gate = "value"
    """Gate of the removed heads: value (their output scaled by alpha) or query (they attend uniformly)."""
    alpha: float = 0.0
    """Scale of a removed head's output under the value gate (0 removes it: the paper's sweep)."""

    def __post_init__(self) -> None:
        check_int("top_k", self.top_k, minimum=0)
        check_int("max_new_tokens", self.max_new_tokens, minimum=0)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, minimum=1)
        if self.memory_gb is not None:
            check_float("memory_gb", self.memory_gb, 0.0, low_open=True)
        object.__setattr__(self, "alpha", check_gate(self.gate, self.alpha))


@dataclass(frozen=True)
class LensConfig(_Replace):
    """What `logit_lens` reads at each layer (Table 41)."""

    k: int = 10
    """Top-k tokens per layer."""
    gate: Gate = "value"
    """Gate for the mask: value or query."""
    alpha: float = 0.0
    """Scale of heads outside the mask (value gate)."""
    streams: tuple[str, ...] = ("resid", "attn")
    """Streams read: resid (the block output), attn (the attention output), embed (the embedding row)."""
    final_norm: bool = True
    """Apply the final norm before the unembedding; --no-final-norm reads the raw residual (the reference notebook)."""

    def __post_init__(self) -> None:
        check_int("k", self.k, minimum=1)
        object.__setattr__(self, "alpha", check_gate(self.gate, self.alpha))
        object.__setattr__(self, "streams", tuple(self.streams))
        unknown = [s for s in self.streams if s not in LENS_STREAMS]
        if unknown or not self.streams:
            raise ValueError(f"streams must be drawn from {list(LENS_STREAMS)}, got {list(self.streams)}")


@dataclass(frozen=True)
class SimilarityConfig(_Replace):
    """The settings `setting_similarity` compares with the instructed run, layer by layer (Fig. 4)."""

    instruction: str | None = None
    """Instruction template with `{input}` for the instructed settings (the CLI's default: the --task's)."""
    gate: Gate = "value"
    """Gate for the mask: value or query."""
    alpha: float = 0.0
    """Scale of heads outside the mask (value gate)."""

    def __post_init__(self) -> None:
        if self.instruction is not None and "{input}" not in self.instruction:
            raise ValueError(f"instruction must be a template with {{input}}, got {self.instruction!r}")
        object.__setattr__(self, "alpha", check_gate(self.gate, self.alpha))


@dataclass(frozen=True)
class AttentionConfig(_Replace):
    """Which settings and examples `attention_on_target` reads (Table 7)."""

    instruction: str | None = None
    """Instruction template with `{input}` (default: Table 7's prompt for a task named X_v_Y_3, else the task's)."""
    settings: tuple[str, ...] = ("original", "instructed", "masked")
    """Settings: original, instructed, masked (no instruction, the mask under the gate), masked+instructed."""
    gate: Gate = "value"
    """Gate for the mask: value or query."""
    split: Split = "eval"
    """The task's pairs read: eval (the held-out ones, the paper's 100), train or all."""
    batch_size: int = 16
    """Examples per forward pass."""

    def __post_init__(self) -> None:
        if self.instruction is not None and "{input}" not in self.instruction:
            raise ValueError(f"instruction template {self.instruction!r} lacks '{{input}}'")
        object.__setattr__(self, "settings", tuple(self.settings))
        if not self.settings or any(s not in ATTENTION_SETTINGS for s in self.settings):
            raise ValueError(f"settings must be drawn from {ATTENTION_SETTINGS}, got {list(self.settings)}")
        check_int("batch_size", self.batch_size, minimum=1)


@dataclass(frozen=True)
class PathwayConfig(_Replace):
    """How `group_ablation` removes the pathway groups and their random controls (Table 6)."""

    n_random: int = 5
    """Random groups of the same size per ablated group."""
    seed: int = 0
    """Seed of the random groups."""
    instructed: bool = True
    """Measure the answer loss on the instructed prompts (--no-instructed: without instruction)."""
    gate: Gate = "value"
    """Gate of the removed groups: value or query."""
    split: Split = "eval"
    """The task's pairs the loss is measured on: eval (held out), train or all."""
    batch_size: int = 16
    """Examples per forward pass."""

    def __post_init__(self) -> None:
        check_int("n_random", self.n_random, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_int("batch_size", self.batch_size, minimum=1)
