"""headsup_lens: attention-head masks, functional pathways and their analyses on TransformerLens models.

import headsup_lens as hl
model = hl.load_model("organism")
mask = hl.HeadMask.load("mask.safetensors", model)
with hl.value_gate(model, mask):
    logits = model(tokens)
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:  # what the type checker sees; at run time `_lazy` imports each name on first use
    from . import analysis as analysis
    from . import data as data
    from . import evaluation as evaluation
    from . import gates as gates
    from . import masks as masks
    from . import models as models
    from . import objective as objective
    from . import organism as organism
    from . import plots as plots
    from . import reproduce as reproduce
    from . import sft as sft
    from . import training as training
    from ._formats import FileFormatError as FileFormatError
    from ._io import FolderInUse as FolderInUse
    from .analysis import activation_pattern as activation_pattern
    from .analysis import attention_on_target as attention_on_target
    from .analysis import compare_methods as compare_methods
    from .analysis import head_scores as head_scores
    from .analysis import layer_similarity as layer_similarity
    from .analysis import logit_lens as logit_lens
    from .analysis import pathway_heads as pathway_heads
    from .analysis import removal_sweep as removal_sweep
    from .data import Task as Task
    from .data import load_task as load_task
    from .data import translation_task as translation_task
    from .evaluation import EvalConfig as EvalConfig
    from .evaluation import evaluate as evaluate
    from .gates import query_gate as query_gate
    from .gates import value_gate as value_gate
    from .masks import HeadMask as HeadMask
    from .masks import bake as bake
    from .masks import random_jaccard as random_jaccard
    from .models import ModelFingerprint as ModelFingerprint
    from .models import PromptFormat as PromptFormat
    from .models import fingerprint as fingerprint
    from .models import load_model as load_model
    from .models import prompt_format as prompt_format
    from .models import set_prompt_format as set_prompt_format
    from .sft import FinetuneConfig as FinetuneConfig
    from .sft import finetune_ as finetune_
    from .training import TrainConfig as TrainConfig
    from .training import train_mask as train_mask
    from .training import train_masks as train_masks

from ._version import __version__ as __version__

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
    "random_jaccard": ".masks",
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
__all__ = [
    "EvalConfig",
    "FileFormatError",
    "FinetuneConfig",
    "FolderInUse",
    "HeadMask",
    "ModelFingerprint",
    "PromptFormat",
    "Task",
    "TrainConfig",
    "activation_pattern",
    "analysis",
    "attention_on_target",
    "bake",
    "compare_methods",
    "data",
    "evaluate",
    "evaluation",
    "finetune_",
    "fingerprint",
    "gates",
    "head_scores",
    "layer_similarity",
    "load_model",
    "load_task",
    "logit_lens",
    "masks",
    "models",
    "objective",
    "organism",
    "pathway_heads",
    "plots",
    "prompt_format",
    "query_gate",
    "random_jaccard",
    "removal_sweep",
    "reproduce",
    "set_prompt_format",
    "sft",
    "train_mask",
    "train_masks",
    "training",
    "translation_task",
    "value_gate",
]
