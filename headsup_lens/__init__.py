"""headsup_lens: attention-head masks, functional pathways and their analyses on TransformerLens models.

    import headsup_lens as hl
    model = hl.load_model("organism")
    mask = hl.HeadMask.load("mask.safetensors", model)
    with hl.value_gate(model, mask):
        logits = model(tokens)
"""

from .analysis import removal_sweep as removal_sweep
from .analysis import logit_lens as logit_lens
from .analysis import layer_similarity as layer_similarity
from .analysis import attention_on_target as attention_on_target
from .analysis import pathway_heads as pathway_heads
from .analysis import activation_pattern as activation_pattern
from .data import Task as Task
from .data import load_task as load_task
from .data import translation_task as translation_task
from .evaluation import evaluate as evaluate
from .gates import query_gate as query_gate
from .gates import value_gate as value_gate
from .masks import HeadMask as HeadMask
from .masks import expected_jaccard as expected_jaccard
from .models import ModelFingerprint as ModelFingerprint
from .models import PromptFormat as PromptFormat
from .models import prompt_format as prompt_format
from .models import set_prompt_format as set_prompt_format
from .models import fingerprint as fingerprint
from .models import load_model as load_model
from .training import TrainConfig as TrainConfig
from .training import train_mask as train_mask
from .training import train_masks as train_masks

from . import analysis as analysis
from . import data as data
from . import evaluation as evaluation
from . import gates as gates
from . import masks as masks
from . import models as models
from . import plots as plots
from . import training as training

__version__ = "0.1.0"
