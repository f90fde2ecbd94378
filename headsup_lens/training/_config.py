"""`TrainConfig`: the paper's mask-training recipe (Sec. 3.2, Table 11) and a fast preset."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .._names import Gate
from .._validate import check_ranges
from ..gates._registry import gate_kind
from ..options import recipe_of
from ._schedule import warmup_cosine


@dataclass(frozen=True)
class TrainConfig:
    """Mask training hyper-parameters; the defaults are the paper's (Table 11).

    Translation in the paper is 10 epochs over 9 900 pairs at batch 16, i.e. `steps=6190`; simple
    tasks use 6 250 steps. `TrainConfig.negative_init()` gives the sparser masks of Table 6 / Fig. 9;
    `TrainConfig.fast()` is a short schedule for tiny models and demos (not the paper's).

    Frozen and checked when built: a field out of its range is a ValueError naming it and its value;
    change a config with `config.replace(steps=...)` (`dataclasses.replace`), which checks again.
    """

    steps: int = 6250
    """Optimisation steps (6 250 for simple tasks; 6 190 = 10 epochs of translation)."""
    batch_size: int = 16
    """Examples per task per step; each example draws its own Gumbel noise."""
    lr: float = 1e-2
    """Peak learning rate of AdamW on the mask logits, reached after the warm-up."""
    min_lr: float = 1e-4
    """Learning rate at the end of the cosine decay."""
    warmup_frac: float = 0.1
    """Fraction of the steps with a linear learning-rate warm-up."""
    weight_decay: float = 0.0
    """AdamW weight decay on the logits (0 in the paper)."""
    init_mean: float = 4.0
    """Mean of the initial logits M: 4 starts from the full model (sigmoid(4) = 0.98); -3 is the negative init."""
    init_std: float = 0.02
    """Standard deviation of the initial logits."""
    tau_start: float = 4.0
    """Gumbel-sigmoid temperature at step 0."""
    tau_end: float = 0.05
    """Temperature after the decay, kept until the end."""
    tau_decay_frac: float = 0.4
    """Fraction of the steps over which the temperature decays linearly from tau_start to tau_end."""
    max_grad_norm: float = 1.0
    """Clip the gradient of the mask logits to this norm before each step (the Hugging Face Trainer's
    default, which the paper's code inherits); 0 turns clipping off."""
    size_penalty: float = 0.0
    """Weight lambda of the mask-size penalty lambda * sum(sigmoid(M)) (0 in every run of the paper)."""
    gate: Gate = "value"
    """Where the mask acts, a key of `gates.GATES`: "value" (hook_z, the paper's method) or "query" (uniform attention, App. C.3.2)."""
    mlp: bool = False
    """Also learn one mask slot per layer for the MLP output (App. C.3.3; hurt in the paper)."""
    seed: int = 0
    """Seed of the initial logits, the batch order and the Gumbel noise."""
    checkpoint_every: int = 250
    """Save the logits (and the resume state) every this many steps; 0 saves only at the end."""
    activation_checkpointing: bool = False
    """Keep only each layer's input for the backward pass and recompute the rest (less memory when
    inputs are long, e.g. ag_news or XNLI; about one more forward pass of time). Same gradients.
    Needs the native forward pass: the value gate, with no hook attached to the model."""
    cuda_graph: bool | None = None
    """Capture each step's forward and backward once as a CUDA graph and replay it (`training._graphed`):
    on a GPU, where a step over short rows is bound by launching kernels (one H200 at the 8B shape: about
    a third of the eager step's time). Every row is padded to the run's longest training row (one pass
    per step), so the gradient is the length-grouped step's up to rounding. None (the default): on for a
    model on a GPU with the value gate, no activation checkpointing and rows whose padding at most
    doubles a step's tokens; off otherwise. True asks for it (the query gate and activation
    checkpointing are refused, heavy padding warns); False turns it off. A capture that fails warns
    and runs the same fixed-shape step eagerly. On the CPU it always runs eagerly, and None leaves it off."""
    progress: bool = field(default=True, metadata={"cmd": False})
    """Show a progress bar with loss, temperature and heads kept (the CLI's `--no-progress` hides every bar)."""
    log_every: int = field(default=10, metadata={"cmd": False})
    """Read the losses and heads kept back from the device every this many steps (and before every
    checkpoint and at the end): the history and progress bar are filled then, a non-finite loss
    stops the run then, naming its step. 1 reads back after every step (a host synchronisation each)."""

    # ------------------------------------------------------------------ presets
    @classmethod
    def paper(cls, **overrides) -> TrainConfig:
        """The paper's recipe (the defaults), with optional overrides."""
        return cls(**overrides)

    @classmethod
    def negative_init(cls, **overrides) -> TrainConfig:
        """The paper's negative initialisation N(-3, 0.02): start from few heads and add."""
        return cls(**{"init_mean": -3.0, **overrides})

    @classmethod
    def fast(cls, **overrides) -> TrainConfig:
        """A 300-step schedule for tiny models (demos, tests): lr 0.1 -> 1e-3, init N(2, 0.02).

        With the paper's init 4 and lr 1e-2, Adam needs ~400 steps before any head can switch off;
        a larger learning rate and a closer init let a few hundred steps find the pathway.
        """
        return cls(**{"steps": 300, "lr": 0.1, "min_lr": 1e-3, "init_mean": 2.0, "checkpoint_every": 50, **overrides})

    def __post_init__(self) -> None:
        """Every field in its range (NaN and infinities refused), a registered gate, and options that
        serve together."""
        kind = gate_kind(self.gate)
        check_ranges(
            self,
            {
                "steps": self.steps > 0,
                "batch_size": self.batch_size > 0,
                "lr": self.lr > 0,
                "min_lr": 0 < self.min_lr <= self.lr,
                "warmup_frac": 0 <= self.warmup_frac < 1,
                "tau_decay_frac": 0 < self.tau_decay_frac <= 1,
                "tau_start": self.tau_start > 0,
                "tau_end": self.tau_end > 0,
                "init_std": self.init_std >= 0,
                "weight_decay": self.weight_decay >= 0,
                "size_penalty": self.size_penalty >= 0,
                "max_grad_norm": self.max_grad_norm >= 0,
                "checkpoint_every": self.checkpoint_every >= 0,
                "log_every": self.log_every >= 1,
            },
            {
                "steps": "> 0",
                "batch_size": "> 0",
                "lr": "> 0",
                "min_lr": "in (0, lr]",
                "warmup_frac": "in [0, 1)",
                "tau_decay_frac": "in (0, 1]",
                "tau_start": "> 0",
                "tau_end": "> 0",
                "max_grad_norm": ">= 0 (0 turns clipping off)",
                "checkpoint_every": ">= 0 (0 saves only at the end)",
                "log_every": ">= 1",
            },
        )
        if self.cuda_graph is True and (not kind.stand_in or self.activation_checkpointing):
            raise ValueError(
                f"cuda_graph needs the value gate and no activation checkpointing, got gate={self.gate!r}, "
                f"activation_checkpointing={self.activation_checkpointing}"
            )

    # ------------------------------------------------------------------ schedules

    def lr_at(self, step: int) -> float:
        """Linear warm-up to `lr` over the first `ceil(warmup_frac * steps)` steps, then cosine decay
        to `min_lr` at the last step (`warmup_cosine`; step counts from 0)."""
        warmup = math.ceil(self.warmup_frac * self.steps)
        return warmup_cosine(step, steps=self.steps, warmup=warmup, peak=self.lr, floor=self.min_lr)

    def tau_at(self, step: int) -> float:
        """Linear decay from `tau_start` to `tau_end` over the first `tau_decay_frac` of the steps."""
        decay = self.tau_decay_frac * self.steps
        if step >= decay:
            return self.tau_end
        return self.tau_start + (self.tau_end - self.tau_start) * step / decay

    def replace(self, **changes) -> TrainConfig:
        """A copy with `changes` applied (`dataclasses.replace`)."""
        return replace(self, **changes)

    def recipe(self) -> dict:
        """The fields that determine the result (what a resumed run must share)."""
        return recipe_of(self, ("checkpoint_every", "progress", "activation_checkpointing", "cuda_graph", "log_every"))
