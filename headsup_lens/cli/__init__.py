"""Command line: `headsup COMMAND [--options]`.

Command modules are imported only when their command runs (`_registry.LAZY` lists them with their
one-line help), so `headsup --help` answers without importing torch. A module imported here
registers its command eagerly with `@command` and works too.
"""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
