"""Interventions on attention heads: the gate kinds, registered by name in `GATES` (one class each, in
`_kinds/`), each a context manager that restores the model on exit; baking a mask into weights."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
