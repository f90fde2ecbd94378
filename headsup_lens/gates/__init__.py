"""Interventions on attention heads; each is a context manager that restores the model on exit."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
