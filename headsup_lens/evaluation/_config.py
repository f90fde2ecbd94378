"""`EvalConfig`: how `evaluate` runs the paper's comparison table (Sec. 3.4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .._names import Gate
from .._validate import check_float, check_int
from ..gates._registry import gate_kind
from ..options import recipe_of

TextMetrics = Literal["auto", "on", "off"]
TextStyle = Literal["paper", "first_line"]
Split = Literal["eval", "train", "all"]


@dataclass(frozen=True)
class EvalConfig:
    """Options of `evaluate`; the defaults are the paper's. Every field but `settings` and
    `progress` decides the numbers, so a resumed evaluation must agree with the interrupted one in each."""

    alpha: float = 0.25
    """Scale of the heads outside the mask in the "instructed + scaled mask" setting (value gate only)."""
    gate: Gate = "value"
    """Gate, a key of `gates.GATES`: value (hook_z, the paper's) or query (uniform attention, App. C.3.2)."""
    split: Split = "eval"
    """Split to evaluate: eval (the held-out pairs, the last 100), train or all."""
    max_new_tokens: int | None = None
    """Greedy tokens per answer (default: the task's, 10 for simple tasks, 50 for sentence translation)."""
    batch_size: int = 16
    """Examples per forward pass / generation batch."""
    random_seed: int = 0
    """Seed of the "random mask" setting: the mask shuffled with it (`HeadMask.shuffled`)."""
    generate: bool = True
    """Generate greedy answers: accuracy and every score read from the outputs (--no-generate: only the answer loss)."""
    text_metrics: TextMetrics = "auto"
    """ROUGE-L and BLEU columns: auto (every translation task, and answers of more than two words on average), on or off."""
    text_style: TextStyle = "paper"
    """Text metrics: paper (whole-generation ROUGE-L, Table 8's sentence BLEU 0-1) or first_line (lower-cased words ROUGE-L, sacreBLEU 0-100, on the first line)."""
    settings: tuple[str, ...] = ()
    """Settings to run, by name (`SETTINGS`, e.g. masked "random mask"); empty: every registered one that the task, gate and masks allow."""
    progress: bool = field(default=True, metadata={"cmd": False})
    """Show a progress bar per setting (examples done and their rate; the CLI's `--no-progress` hides every bar)."""

    def __post_init__(self) -> None:
        check_float("alpha", self.alpha, 0.0, 1.0)
        gate_kind(self.gate)
        if self.max_new_tokens is not None:
            check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("random_seed", self.random_seed, minimum=0)
        repeated = sorted({name for name in self.settings if self.settings.count(name) > 1})
        if repeated:
            raise ValueError(f"settings names {repeated} more than once")

    def identity(self) -> dict:
        """The fields that decide the numbers (all but `settings` and `progress`)."""
        return recipe_of(self, ("settings", "progress"))
