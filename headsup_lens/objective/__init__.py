"""The objective both training and evaluation stand on: the answer-token loss (unembedding only the
answer positions) with length-grouped passes, and greedy decoding with the KV cache (unembedding only
the last position, rows leaving the batch at their stop token)."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
