"""The one-command demo (`headsup demo`) and the self-contained HTML report it writes.

`DemoConfig` imports nothing heavy; `run_demo` and `Report` load on first use (so the CLI's
`--help` stays fast)."""

from .._lazy import lazy_exports
from ._config import DemoConfig as DemoConfig

_getattr, _dir = lazy_exports(__name__, {"DemoResult": "._demo", "run_demo": "._demo", "Report": "._report"})
__getattr__ = _getattr
__all__ = ["DemoConfig", *_dir()]


def __dir__() -> list[str]:
    return sorted(__all__)
