"""Lazy public surfaces, for the packages whose import must stay light: a package names what it
exports and imports each piece on first use, so that `import headsup_lens` (and `headsup --help`,
`headsup tasks`) does not pay for torch and TransformerLens up front. Every other package re-exports
its names explicitly (`from ._module import name as name`); type checks are applied where a function
is defined (`_typecheck.checked`), so the object is the same under every name."""

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
        value = module if exports[name] == f".{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)  # later lookups no longer come here
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
