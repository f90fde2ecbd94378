"""The one-command demo (`headsup demo`) and the self-contained HTML report it writes.

`DemoConfig` imports nothing heavy; `run_demo` and `Report` load on first use (so the CLI's
`--help` stays fast)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._config import DemoConfig as DemoConfig

if TYPE_CHECKING:  # what the type checker sees; at run time `_lazy` imports each name on first use
    from ._demo import DemoResult as DemoResult
    from ._demo import run_demo as run_demo
    from ._report import Report as Report

_EXPORTS = {"DemoResult": "._demo", "run_demo": "._demo", "Report": "._report"}
_lazy_getattr, _lazy_dir = lazy_exports(__name__, _EXPORTS)
__getattr__ = _lazy_getattr
__all__ = [
    "DemoConfig",
    "DemoResult",
    "Report",
    "run_demo",
]


def __dir__() -> list[str]:
    return sorted(__all__)
