"""headsup_lens: attention-head masks, functional pathways and their analyses on TransformerLens models.

import headsup_lens as hl
model = hl.load_model("organism")
mask = hl.HeadMask.load("mask.safetensors", model)
with hl.value_gate(model, mask):
    logits = model(tokens)
"""

from ._lazy import lazy_exports as _lazy_exports

__version__ = "0.2.0"

# Public name -> the subpackage it comes from; imported on first use (see `_lazy`).
_EXPORTS = {
    "removal_sweep": ".analysis",
    "logit_lens": ".analysis",
    "layer_similarity": ".analysis",
    "attention_on_target": ".analysis",
    "pathway_heads": ".analysis",
    "activation_pattern": ".analysis",
    "head_scores": ".analysis",
    "compare_methods": ".analysis",
    "Task": ".data",
    "load_task": ".data",
    "translation_task": ".data",
    "evaluate": ".evaluation",
    "EvalConfig": ".evaluation",
    "query_gate": ".gates",
    "value_gate": ".gates",
    "HeadMask": ".masks",
    "bake": ".masks",
    "expected_jaccard": ".masks",
    "ModelFingerprint": ".models",
    "PromptFormat": ".models",
    "prompt_format": ".models",
    "set_prompt_format": ".models",
    "fingerprint": ".models",
    "load_model": ".models",
    "FolderInUse": "._io",
    "FileFormatError": "._formats",
    "TrainConfig": ".training",
    "train_mask": ".training",
    "train_masks": ".training",
    "finetune_": ".sft",
    "FinetuneConfig": ".sft",
    "analysis": ".analysis",
    "data": ".data",
    "evaluation": ".evaluation",
    "gates": ".gates",
    "masks": ".masks",
    "models": ".models",
    "plots": ".plots",
    "reproduce": ".reproduce",
    "training": ".training",
    "organism": ".organism",
    "objective": ".objective",
    "sft": ".sft",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
