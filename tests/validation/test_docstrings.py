"""Every exported function and class of every public namespace, and every public method and property
of those classes, has a docstring: the API reference is generated from them (mkdocstrings)."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import pkgutil
from collections.abc import Iterator

import headsup_lens

PACKAGE = "headsup_lens"
# Members whose docstrings are pending elsewhere (none now); the test also fails when one of them
# gets its docstring, so that this set only shrinks.
PENDING: set[str] = set()


def public_namespaces() -> list[str]:
    """The package, its public subpackages and its public modules (`options`)."""
    found = [PACKAGE]
    for module in pkgutil.iter_modules(headsup_lens.__path__):
        if not module.name.startswith("_"):
            found.append(f"{PACKAGE}.{module.name}")
    return found


def exported(module) -> list[str]:
    names = getattr(module, "__all__", None)
    return list(names) if names is not None else [n for n in dir(module) if not n.startswith("_")]


def docstring(obj) -> str:
    text = obj.__doc__ or ""
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and text.startswith(f"{obj.__name__}("):
        return ""  # the signature dataclasses write when a class has no docstring
    return text.strip()


def defined_here(obj) -> str | None:
    """`module.qualname` of an object defined in the package, else None."""
    inner = inspect.unwrap(obj) if callable(obj) else obj
    module = getattr(inner, "__module__", None) or ""
    if not module.startswith(PACKAGE):
        return None
    return f"{module}.{getattr(inner, '__qualname__', getattr(inner, '__name__', '?'))}"


def members(cls: type) -> Iterator[tuple[str, object]]:
    """Public methods, class methods, static methods and properties of `cls` and of its bases in the
    package (enum members and data fields are not members here)."""
    if issubclass(cls, enum.Enum):
        return
    seen = set()
    for owner in cls.__mro__:
        if not owner.__module__.startswith(PACKAGE):
            continue
        for name, value in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            method = callable(value) and inspect.isfunction(inspect.unwrap(value))
            if isinstance(value, property) or method:
                yield f"{owner.__module__}.{owner.__qualname__}.{name}", value


def undocumented() -> set[str]:
    missing = set()
    for namespace in public_namespaces():
        module = importlib.import_module(namespace)
        for name in exported(module):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
                continue
            where = defined_here(obj)
            if where is None:
                continue
            if not docstring(obj):
                missing.add(where)
            if inspect.isclass(obj):
                for member, value in members(obj):
                    # An override may rely on its base's docstring (inspect.getdoc looks there).
                    text = value.__doc__ if isinstance(value, property) else inspect.getdoc(value)
                    if not (text or "").strip():
                        missing.add(member)
    return missing


def test_every_exported_function_class_and_method_has_a_docstring():
    missing = undocumented()
    assert not missing - PENDING, "no docstring: " + ", ".join(sorted(missing - PENDING))
    assert not PENDING - missing, "documented now, remove from PENDING: " + ", ".join(sorted(PENDING - missing))


def test_the_walk_sees_the_public_surface():
    """The walk reaches subpackages, their classes' methods and properties (it could pass by seeing nothing)."""
    namespaces = public_namespaces()
    assert {"headsup_lens.masks", "headsup_lens.analysis", "headsup_lens.options"} <= set(namespaces)
    assert "headsup_lens.cli" in namespaces
    from headsup_lens.analysis import RemovalSweep
    from headsup_lens.data import Task

    names = {name.rsplit(".", 1)[1] for name, _ in members(Task)}
    assert {"eval_pairs", "user_text", "from_pairs"} <= names
    assert "switch_step" in {name.rsplit(".", 1)[1] for name, _ in members(RemovalSweep)}


def test_a_class_without_a_docstring_is_found():
    @dataclasses.dataclass
    class Plain:
        x: int

    Plain.__module__ = f"{PACKAGE}.example"
    assert docstring(Plain) == ""
