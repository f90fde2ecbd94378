"""The one-command demo (`headsup demo`) and the self-contained HTML report it writes.

`DemoConfig` imports nothing heavy; `run_demo` and `Report` load on first use (so the CLI's
`--help` stays fast)."""

from ._config import DemoConfig as DemoConfig

__all__ = ["DemoConfig", "DemoResult", "Report", "run_demo"]


def __getattr__(name: str):
    if name in ("DemoResult", "run_demo"):
        from . import _demo

        return getattr(_demo, name)
    if name == "Report":
        from ._report import Report

        return Report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
