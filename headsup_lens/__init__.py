"""headsup_lens: attention-head masks, functional pathways and their analyses on TransformerLens models.

import headsup_lens as hl
model = hl.load_model("organism")
mask = hl.HeadMask.load("mask.safetensors", model)
with hl.value_gate(model, mask):
    logits = model(tokens)
"""

import lazy_loader as _lazy_loader

from ._typecheck import check_exports as _check_exports

_check_exports(__name__)  # first: every module of the package loads behind it

from ._version import __version__ as __version__  # noqa: E402

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
