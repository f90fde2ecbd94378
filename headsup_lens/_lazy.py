"""Lazy public surfaces: a package names what it exports and imports each piece on first use, so that
`import headsup_lens` (and `headsup --help`) does not pay for torch and TransformerLens up front."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for a package whose public name `n` comes from the relative module
    `exports[n]`: the module itself when it is named `n` (a subpackage), else its attribute `n`."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(exports[name], package)
        if exports[name] == f".{name}":
            value = module
        else:
            from ._typecheck import checked

            value = checked(getattr(module, name))  # public names check their argument types
        setattr(sys.modules[package], name, value)  # later lookups no longer come here
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
