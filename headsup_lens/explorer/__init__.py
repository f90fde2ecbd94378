"""The pathway explorer: a Jupyter widget to remove heads by hand or along an order and watch the
continuation, the tracked tokens, the logit lens and a head's attention change (`explore`).

It needs the `explore` extra (anywidget); `explore` and `Explorer` load on first use."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
