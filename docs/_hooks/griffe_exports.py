"""A griffe extension: the API reference shows what each `headsup_lens` package exports.

The packages export names two ways that static analysis does not read as exports: a redundant alias
(`from ._head_mask import HeadMask as HeadMask`, the house style) and a lazy map (`lazy_exports(...)`:
imported on first use, with `__all__` computed from it). This extension asks the package itself, at
run time: its `__all__` when it has one, else its public names that are aliases into the package.
A name that only the lazy map knows becomes an alias to where the object is defined.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator

import griffe

PACKAGE = "headsup_lens"


class PackageExports(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path != PACKAGE:
            return
        for module in [pkg, *(m for m in pkg.modules.values() if not m.name.startswith("_") and m.is_subpackage)]:
            _export(module, pkg)

    on_package_loaded = on_package  # the event's name before griffe 1.6


def _modules(module: griffe.Module) -> Iterator[griffe.Module]:
    yield module
    for child in module.modules.values():
        yield from _modules(child)


def _target(root: griffe.Module, runtime, name: str) -> str | None:
    """The dotted path of the object the package exports as `name` (importing it, as a user would)."""
    obj = getattr(runtime, name)
    if inspect.ismodule(obj):
        return obj.__name__
    inner = inspect.unwrap(obj) if callable(obj) else obj
    module, qualname = getattr(inner, "__module__", None), getattr(inner, "__qualname__", None)
    if isinstance(module, str) and module.startswith(PACKAGE) and qualname and "<" not in qualname:
        return f"{module}.{qualname}"
    for candidate in _modules(root):  # a constant: the module that defines this very object
        member = candidate.members.get(name)
        if member is not None and not member.is_alias and getattr(sys.modules.get(candidate.path), name, None) is obj:
            return f"{candidate.path}.{name}"
    return None


def _export(module: griffe.Module, root: griffe.Module) -> None:
    runtime = importlib.import_module(module.path)
    names = getattr(runtime, "__all__", None)
    if names is None:
        names = [
            name
            for name, member in module.members.items()
            if member.is_alias and not name.startswith("_") and member.target_path.startswith(f"{PACKAGE}.")
        ]
    for name in names:
        if name not in module.members:
            target = _target(root, runtime, name)
            if target is not None:
                module.set_member(name, griffe.Alias(name, target, parent=module))
    module.exports = sorted(names)
