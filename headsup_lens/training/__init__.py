"""Mask training: Gumbel-sigmoid straight-through logits with the paper's schedules, one or many tasks at
once; and the optimisation core every trainer shares (`run_steps`, `warmup_cosine`, `BatchSampler`,
run identities and resume states)."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
