"""Mask training: Gumbel-sigmoid straight-through logits with the paper's schedules, one or many tasks at once."""

from .._lazy import lazy_exports

# Public name -> the module it comes from; imported on first use (`TrainConfig` needs no torch).
_EXPORTS = {
    "TrainingAdvice": "._advice",
    "TrainConfig": "._config",
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
