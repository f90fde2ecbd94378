"""The one-command demo (`headsup demo`) and the self-contained HTML report it writes.

`DemoConfig` imports nothing heavy; `run_demo` and `Report` load on first use (so the CLI's
`--help` stays fast)."""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
