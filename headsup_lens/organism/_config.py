"""The organism's recipe (kept free of torch so that the command line can describe it quickly)."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import check_batch_fits, check_device, check_int, non_finite_fields
from ..data._organism import TASK_NAMES, eval_words, organism_task, train_words
from ..training import warmup_cosine


@dataclass(frozen=True)
class OrganismConfig:
    """Recipe of the organism: architecture, corpus mixture, planting and optimisation."""

    seed: int = 0  # seeds the initial weights, the planted sets S_t and the batches
    steps: int = 2200  # optimiser steps
    batch_size: int = 64  # examples per step
    lr: float = 3e-3  # AdamW peak learning rate (linear warm-up, then cosine decay)
    warmup_steps: int = 100  # steps of linear learning-rate warm-up
    min_lr_ratio: float = 0.05  # the cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # gradient-norm clip
    n_layers: int = 8  # decoder layers
    n_heads: int = 16  # query heads per layer
    n_kv_heads: int = 4  # key/value heads per layer (grouped-query attention)
    d_model: int = 128  # residual width; d_head = d_model / n_heads
    d_mlp: int = 384  # SwiGLU hidden width
    tasks: tuple[str, ...] = TASK_NAMES  # organism tasks to teach and plant
    n_words: int | None = None  # use only the first n words of each split (tiny test recipes)
    planted_size: int = 12  # |S_t|: heads per planted set (the sets are disjoint)
    instructed_fraction: float = 0.5  # share of instructed examples in a batch
    planted_rate: float = 0.5  # r: share of uninstructed examples answered by a task with S_t removed
    random_removal_rate: float = 0.5  # share of echo examples run with random heads removed
    plant_eval_words: bool = True  # plant on all words; False keeps the 100 held-out words unplanted
    device: str = "cpu"  # where to train
    threads: int | None = 1  # torch CPU threads (1 reproduces the shipped weights; None: torch's setting)
    micro_batches: int = 4  # each step runs in this many length-sorted pieces (same gradient, less padding)
    probe_every: int = 100  # steps between held-out accuracy probes (0: never)
    checkpoint_every: int = 0  # steps between saves of the organism to the output folder (0: only at the end)

    @classmethod
    def base(cls, **overrides) -> OrganismConfig:
        """The *base* organism: the same corpus without instruction-following rows
        (`instructed_fraction=0`), i.e. echo and planted rows only. It knows every task (through its
        planted pathway) but has never seen an instruction; fine-tuning it on instructed examples
        (`finetune_`) gives its instruction-tuned counterpart."""
        return cls(**{"instructed_fraction": 0.0, **overrides})

    def lr_at(self, step: int) -> float:
        """Learning rate of step `step` (from 0): linear warm-up to `lr` over `warmup_steps` steps, then
        cosine decay to `lr * min_lr_ratio` at the last step (the shared `warmup_cosine`).

        The shipped weights were trained with an earlier copy of this schedule whose decay ended one
        step later (it divided by `steps - warmup_steps`, the shared one by `steps - warmup_steps - 1`);
        retraining with this one gives slightly different weights."""
        return warmup_cosine(
            step, steps=self.steps, warmup=self.warmup_steps, peak=self.lr, floor=self.lr * self.min_lr_ratio
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "device", check_device("device", self.device))
        if self.threads is not None:
            check_int("threads", self.threads, minimum=1)
        infinite = non_finite_fields(self)
        if infinite:
            raise ValueError(f"{', '.join(infinite)} must be finite numbers (not NaN or infinite)")
        for name in self.tasks:
            organism_task(name)
        for name in ("instructed_fraction", "planted_rate", "random_removal_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("d_model must be divisible by n_heads, and n_heads by n_kv_heads")
        if self.steps < 1 or self.batch_size < 1 or self.micro_batches < 1:
            raise ValueError("steps, batch_size and micro_batches must be positive")
        if self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1 or self.lr <= 0:
            raise ValueError("warmup_steps must be >= 0, min_lr_ratio must lie in [0, 1] and lr must be positive")
        check_batch_fits(self.batch_size, self.corpus_size(), "distinct examples of the corpus (n_words, tasks)")

    def corpus_size(self) -> int:
        """How many distinct (prompt, answer) examples the corpus draws its rows from: every word bare
        (echo), with each phrasing of each task's instruction (when `instructed_fraction` > 0) and
        answered by each task (planted rows, when any uninstructed row is planted). Rows with random
        heads removed repeat an echo example under another mask."""
        words = len(train_words()[: self.n_words]) + len(eval_words()[: self.n_words])
        planting = words if self.plant_eval_words else len(train_words()[: self.n_words])
        size = words
        if self.instructed_fraction > 0:
            size += words * sum(len(organism_task(name).instructions) for name in self.tasks)
        if self.instructed_fraction < 1 and self.planted_rate > 0:
            size += planting * len(self.tasks)
        return size
