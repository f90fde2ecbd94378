"""headsup_lens: attention-head masks, functional pathways and their analyses on TransformerLens models.

    import headsup_lens as hl
    model = hl.load_model("organism")
    mask = hl.HeadMask.load("mask.safetensors", model)
    with hl.value_gate(model, mask):
        logits = model(tokens)
"""

from .data import Task as Task
from .data import load_task as load_task
from .data import translation_task as translation_task
from .gates import query_gate as query_gate
from .gates import value_gate as value_gate
from .masks import HeadMask as HeadMask
from .masks import expected_jaccard as expected_jaccard
from .models import ModelFingerprint as ModelFingerprint
from .models import chat_template as chat_template
from .models import fingerprint as fingerprint
from .models import load_model as load_model

__version__ = "0.1.0"
