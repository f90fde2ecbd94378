"""The one-command demo (`headsup demo`) and the self-contained HTML report it writes.

`DemoConfig` imports nothing heavy; `run_demo` and `Report` load on first use (so the CLI's
`--help` stays fast)."""

from .._typecheck import checked as _checked
from ._config import DemoConfig as DemoConfig

_checked(DemoConfig)  # a wrong-typed field is a TypeError naming it

__all__ = ["DemoConfig", "DemoResult", "Report", "run_demo"]


def __getattr__(name: str):
    from .._typecheck import checked

    if name in ("DemoResult", "run_demo"):
        from . import _demo

        return checked(getattr(_demo, name))
    if name == "Report":
        from ._report import Report

        return checked(Report)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
