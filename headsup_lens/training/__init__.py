"""Mask training: Gumbel-sigmoid straight-through logits with the paper's schedules, one or many tasks at
once; and the optimisation core every trainer shares (`run_steps`, `warmup_cosine`, `BatchSampler`,
run identities and resume states)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # what the type checker sees; at run time `_lazy` imports each name on first use
    from ._advice import TrainingAdvice as TrainingAdvice
    from ._config import TrainConfig as TrainConfig
    from ._estimate import seconds_per_step as seconds_per_step
    from ._loop import BatchSampler as BatchSampler
    from ._loop import StepCallback as StepCallback
    from ._loop import StepEnd as StepEnd
    from ._loop import StepTimer as StepTimer
    from ._loop import check_finite_loss as check_finite_loss
    from ._loop import check_same_run as check_same_run
    from ._loop import load_state as load_state
    from ._loop import run_identity as run_identity
    from ._loop import run_steps as run_steps
    from ._loop import save_state as save_state
    from ._schedule import non_finite_fields as non_finite_fields
    from ._schedule import warmup_cosine as warmup_cosine
    from ._train import TrainResult as TrainResult
    from ._train import left_tail_gumbel as left_tail_gumbel
    from ._train import load_trajectory as load_trajectory
    from ._train import resume_step as resume_step
    from ._train import safe_name as safe_name
    from ._train import straight_through as straight_through
    from ._train import train_mask as train_mask
    from ._train import train_masks as train_masks

# Public name -> the module it comes from; imported on first use (`TrainConfig` needs no torch).
_EXPORTS = {
    "TrainingAdvice": "._advice",
    "TrainConfig": "._config",
    "seconds_per_step": "._estimate",
    "BatchSampler": "._loop",
    "StepCallback": "._loop",
    "StepEnd": "._loop",
    "StepTimer": "._loop",
    "check_finite_loss": "._loop",
    "check_same_run": "._loop",
    "load_state": "._loop",
    "run_identity": "._loop",
    "run_steps": "._loop",
    "save_state": "._loop",
    "non_finite_fields": "._schedule",
    "warmup_cosine": "._schedule",
    "TrainResult": "._train",
    "left_tail_gumbel": "._train",
    "load_trajectory": "._train",
    "resume_step": "._train",
    "safe_name": "._train",
    "straight_through": "._train",
    "train_mask": "._train",
    "train_masks": "._train",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "BatchSampler",
    "StepCallback",
    "StepEnd",
    "StepTimer",
    "TrainConfig",
    "TrainResult",
    "TrainingAdvice",
    "check_finite_loss",
    "check_same_run",
    "left_tail_gumbel",
    "load_state",
    "load_trajectory",
    "non_finite_fields",
    "resume_step",
    "run_identity",
    "run_steps",
    "safe_name",
    "save_state",
    "seconds_per_step",
    "straight_through",
    "train_mask",
    "train_masks",
    "warmup_cosine",
]
