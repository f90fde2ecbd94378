"""Evaluation: answer loss and perplexity, greedy accuracy (the paper's matcher and a strict one, with
Wilson intervals, echo and label controls, paired tests), ROUGE-L, BLEU, and the paper's settings table
(`evaluate`, its settings registry `SETTINGS`, `rescore` of stored outputs, the schedule curve)."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
