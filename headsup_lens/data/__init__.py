"""Tasks: function-vector JSON, XNLI translation, IWSLT2017, few-shot, your own files; tokenisation with
answer-only labels. Tokenisation (torch, TransformerLens) is imported on first use, so that listing
and loading tasks stays light (`headsup tasks`)."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
