"""Mask training: Gumbel-sigmoid straight-through logits with the paper's schedules, one or many tasks at
once; and the optimisation core every trainer shares (`run_steps`, `warmup_cosine`, `BatchSampler`,
run identities and resume states)."""

from .._lazy import lazy_exports

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
__all__ = sorted(_EXPORTS)
