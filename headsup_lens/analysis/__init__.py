"""Analyses of functional pathways (the paper's Sec. 4 and App. C): removal sweeps, logit lens, layer similarity,
attention on target, pathways across masks, activation patterns."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
