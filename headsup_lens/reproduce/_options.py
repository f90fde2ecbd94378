"""The options every reproduction script takes (light: no torch, so `--help` answers at once)."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import (
    DataOptions,
    DebugOptions,
    FigureOptions,
    ModelOptions,
    ProgressOptions,
    ThreadOptions,
    check_counts,
)

# The organism task the single-task figures use: a made-up dictionary, the analogue of the paper's translation.
ORGANISM_TASK = "organism/translate"
# Tasks of the multi-task artifacts (Tables 1/2, 5, 6): four of the eight, to keep `run_all` short on 2 cores.
DEFAULT_ORGANISM_TASKS = ("organism/translate", "organism/reverse", "organism/uppercase", "organism/antonym")
SCHEDULES = ("auto", "fast", "paper")
CHECKPOINT_EVERY = 31  # the reference's `--save_steps 31`


@dataclass(frozen=True)
class ExperimentOptions(DebugOptions, ProgressOptions, ThreadOptions, FigureOptions, DataOptions, ModelOptions):
    """Options of a reproduction script (`experiments/*.py`)."""

    task: str | None = None
    """Task name (default on the organism: organism/translate; required for other models)."""
    out: str | None = None
    """Output root; files go to <out>/<model>/ (default: outputs/experiments/, git-ignored)."""
    update_figures: bool = False
    """Write to the committed figures/ folder (the same as --out figures)."""
    schedule: str = "auto"
    """Mask schedule: auto (fast on the organism, the paper's otherwise), fast or paper."""
    steps: int | None = None
    """Override the schedule's training steps."""
    batch_size: int | None = None
    """Override the schedule's batch size per task."""
    eval_batch_size: int = 64
    """Examples per evaluation forward pass / generation."""
    seed: int = 0
    """Seed of mask training and random baselines."""
    checkpoint_every: int = CHECKPOINT_EVERY
    """Save the mask logits every this many training steps (the reference's save_steps; the Fig. 3 trajectories)."""
    masks: str | None = None
    """Folder of stored masks to use instead of training: <task>.safetensors (default init), <task>_negative, <task>_query, <task>_mlp (.safetensors); e.g. figures/smollm2/masks."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}")
        check_counts(self, steps=1, batch_size=1, eval_batch_size=1, seed=0, checkpoint_every=0)


@dataclass(frozen=True)
class MultiTaskOptions(ExperimentOptions):
    """Options of a reproduction script that compares several tasks."""

    tasks: list[str] | None = None
    """Tasks to compare (default on the organism: organism/translate organism/reverse organism/uppercase organism/antonym)."""
