"""Mask training (Gumbel-sigmoid straight-through logits with the paper's schedules) and supervised
fine-tuning of the model's weights (`finetune`)."""

from .._lazy import lazy_exports

# Public name -> the module it comes from; imported on first use (`TrainConfig` needs no torch).
_EXPORTS = {
    "FinetuneConfig": "._finetune",
    "FinetuneResult": "._finetune",
    "add_lora_": "._finetune",
    "finetune": "._finetune",
    "pattern_subset": "._finetune",
    "TrainingAdvice": "._advice",
    "TrainConfig": "._config",
    "answer_logits": "._objective",
    "answer_nll": "._objective",
    "answer_positions": "._objective",
    "length_batches": "._objective",
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
