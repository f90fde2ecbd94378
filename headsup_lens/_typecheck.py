"""Run-time type checks of the public surface: a wrong-typed argument to any public function, method
or config field is a `TypeError` that names the parameter (beartype, constant time per call).

The public surface is declared once, by the export lists (`__init__.pyi`), and checked there:
`check_exports` (called as the package is imported) checks every function and class that a module
of the package defines under a name an export list takes from it (directly, or through a private
module that re-exports it), in that module, as the module finishes loading.
So the name the user imports, the subpackage's name and the defining module's name are one checked
object, and calls from inside the package are checked where they enter too. `checked` marks
anything else by hand (a public function of a module that is not re-exported).

Only types are checked here: jaxtyping annotations count as their array type (`torch.Tensor`), so
shapes and dtypes are checked where the library validates them and, in the tests, by jaxtyping's
import hook (`--jaxtyping-packages`), not on every call in production. Values (ranges, names,
sizes) are the validation layer's job (`_validate`). Return values are not checked.
"""

from __future__ import annotations

import ast
import collections.abc
import functools
import importlib.abc
import inspect
import operator
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from typing_extensions import Unpack

_MARK = "__headsup_typechecked__"
_PACKAGE = __name__.split(".")[0]
# A type -> what to do with a value given in its place (a name instead of a loaded object), or None.
_ADVICE: dict[type, Callable[[Any], str | None]] = {}


def advise(cls: type, advice: Callable[[Any], str | None]) -> None:
    """Register how to turn a wrong value into a `cls` (e.g. a task's name into a `Task`: "load it first:
    hl.load_task(...)"); every type error of a parameter whose annotation names `cls` ends with it."""
    _ADVICE[cls] = advice


def _advice(hint: Any, value: Any) -> str:
    for cls, advice in _ADVICE.items():
        if _names(hint, cls):
            text = advice(value)
            if text:
                return f"; {text}"
    return ""


def _names(hint: Any, cls: type) -> bool:
    return hint is cls or any(_names(arg, cls) for arg in typing.get_args(hint))


def _ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").split(".")[0] == _PACKAGE


def _runtime_hint(hint: Any) -> Any:
    """`hint` with every jaxtyping array annotation replaced by its array type (no shape check)."""
    # Recognised without importing jaxtyping (its import costs more than the whole check).
    if isinstance(hint, type) and type(hint).__module__.startswith("jaxtyping") and hasattr(hint, "array_type"):
        return hint.array_type
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_runtime_hint(arg) for arg in typing.get_args(hint)))
    return hint


def checked_function(fn: Callable) -> Callable:
    """`fn` behind a check of its arguments' types. The check is built on the first call (so that
    importing the package stays light); annotations that cannot be resolved at run time are left
    unchecked."""
    if getattr(fn, _MARK, False):
        return fn
    built: list[Callable[[tuple, dict], None]] = []

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not built:
            built.append(_build_check(fn))
        built[0](args, kwargs)
        return fn(*args, **kwargs)

    setattr(call, _MARK, True)
    return call


def _no_check(args: tuple, kwargs: dict) -> None:
    return None


def _unpacked_keywords(signature: inspect.Signature, hints: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """`(name, {option: type})` of a `**name: Unpack[Options]` parameter (PEP 692: keyword options that
    several functions share, declared once as a TypedDict), or None."""
    for name, parameter in signature.parameters.items():
        hint = hints.get(name)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and typing.get_origin(hint) is Unpack:
            (options,) = typing.get_args(hint)
            return name, typing.get_type_hints(options)
    return None


def _build_check(fn: Callable) -> Callable[[tuple, dict], None]:
    """A function of `(args, kwargs)` that raises a TypeError naming the first argument whose type
    does not match `fn`'s annotation (defaults are not checked; missing arguments are left to the
    call itself to report)."""
    # deferred: beartype loads with the first checked call, so importing the package stays light
    from beartype import BeartypeConf
    from beartype.door import is_bearable

    raw = inspect.unwrap(fn)
    try:
        hints = typing.get_type_hints(raw)
        signature = inspect.signature(raw)
    except Exception:  # an annotation only meaningful to static checkers: leave the function as it is
        return _no_check
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    keywords = _unpacked_keywords(signature, hints)  # `**options: Unpack[SomeTypedDict]`: each option's type
    hints = {
        name: _runtime_hint(hint)
        for name, hint in hints.items()
        if name in signature.parameters
        and signature.parameters[name].kind not in variadic
        and hint not in (typing.Any, object)
    }
    if keywords is not None:
        hints.update({name: _runtime_hint(hint) for name, hint in keywords[1].items()})
    if not hints:
        return _no_check
    conf = BeartypeConf(is_pep484_tower=True)  # an int passes for a float (PEP 484's numeric tower)
    where = f"{getattr(raw, '__qualname__', raw.__name__)}()"
    no_text = {name for name, hint in hints.items() if _text_only_as_collection(hint, conf)}

    def check(args: tuple, kwargs: dict) -> None:
        try:
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError:
            return  # a missing or unknown argument: the call itself says which
        arguments = dict(bound.arguments)
        if keywords is not None:
            options = arguments.pop(keywords[0], {})
            unknown = [name for name in options if name not in keywords[1]]
            if unknown:
                raise TypeError(
                    f"{where} got an unexpected keyword argument {unknown[0]!r}; its options are "
                    f"{', '.join(keywords[1])}"
                )
            arguments.update(options)
        for name, value in arguments.items():
            hint = hints.get(name)
            if hint is None:
                continue
            if name in no_text and isinstance(value, (str, bytes)):
                raise TypeError(
                    f"{where}: argument {name}={_short(value)} ({type(value).__name__}) does not have the type it "
                    f"needs: {_hint_name(hint)}; one string is not accepted as a sequence here (it would be read "
                    "character by character): pass a list, e.g. [text]"
                )
            if not is_bearable(value, hint, conf=conf):
                raise TypeError(
                    f"{where}: argument {name}={_short(value)} ({type(value).__name__}) does not have "
                    f"the type it needs: {_hint_name(hint)}{_advice(hint, value)}"
                )

    return check


# Abstract collection types a `str` (or `bytes`) satisfies only because it is a sequence of characters.
_COLLECTIONS = (
    collections.abc.Sequence,
    collections.abc.Iterable,
    collections.abc.Collection,
    collections.abc.Container,
    collections.abc.Reversible,
)


def _text_only_as_collection(hint: Any, conf: Any) -> bool:
    """Whether `hint` admits a string only as a collection (`Sequence[str]`, `Iterable[str]`,
    `Sequence[str] | None`, ...) and not as a string (`str | Sequence[str]`, `Any` admit it).

    beartype (rightly, for Python) takes `"abc"` for a `Sequence[str]`; a parameter that means
    several texts would then score or tokenise one text character by character."""
    from beartype.door import is_bearable  # deferred: see `_build_check`, its only caller

    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    admitting = [m for m in members if is_bearable("text", m, conf=conf) or is_bearable(b"text", m, conf=conf)]
    return bool(admitting) and all((typing.get_origin(m) or m) in _COLLECTIONS for m in admitting)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _hint_name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("collections.abc.", "")


def checked_class(cls: type) -> type:
    """Check the parameters of `cls.__init__` (dataclass fields included) and of its public
    methods, class methods and static methods, in place."""
    if cls.__dict__.get(_MARK):
        return cls
    for name, member in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, (staticmethod, classmethod)):
            inner = member.__func__
            if inspect.isfunction(inner) and _ours(inner):
                setattr(cls, name, type(member)(checked_function(inner)))
        elif inspect.isfunction(member) and (_ours(member) or name == "__init__"):
            setattr(cls, name, checked_function(member))
    setattr(cls, _MARK, True)
    return cls


_Decorated = TypeVar("_Decorated")


def checked(obj: _Decorated) -> _Decorated:
    """A public function or class of this package with run-time type checks; anything else unchanged
    (typed as the identity, so that type checkers see the function or class itself)."""
    if not _ours(obj):
        return obj
    if inspect.isclass(obj):
        return typing.cast(_Decorated, checked_class(obj))
    if callable(obj) and (inspect.isfunction(obj) or inspect.isfunction(inspect.unwrap(obj))):  # functools.cache too
        return typing.cast(_Decorated, checked_function(obj))
    return obj


# ------------------------------------------------------------------- the export lists, checked
_ROOT = Path(__file__).parent


@functools.cache
def _export_sources() -> dict[str, frozenset[str]]:
    """Each name an export list (`__init__.pyi`) takes from a private module -> those modules."""
    sources: dict[str, set[str]] = {}
    for stub in _ROOT.rglob("__init__.pyi"):
        package = ".".join((_PACKAGE, *stub.parent.relative_to(_ROOT).parts))
        for node in ast.parse(stub.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and (node.module or "").startswith("_"):
                for alias in node.names:
                    sources.setdefault(alias.name, set()).add(f"{package}.{node.module}")
    return {name: frozenset(modules) for name, modules in sources.items()}


def exported_names() -> frozenset[str]:
    """Every name an export list of the package takes from one of its modules."""
    return frozenset(_export_sources())


@functools.cache
def _imports(module: str) -> dict[str, str]:
    """The names `module`'s source imports from another module of the package -> that module."""
    parts = module.split(".")[1:]
    path = _ROOT.joinpath(*parts, "__init__.py")
    package = path.is_file()
    if not package:
        path = _ROOT.joinpath(*parts[:-1], f"{parts[-1]}.py") if parts else path
    if not path.is_file():
        return {}
    here = module.split(".") if package else module.split(".")[:-1]
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - node.level + 1]
            origin = ".".join([*base, *([node.module] if node.module else [])])
            found.update({alias.asname or alias.name: origin for alias in node.names})
    return found


def _defined_in(module: str, name: str) -> str:
    """The module that defines what `module` holds under `name`, re-exports followed."""
    seen = {module}
    while name in _imports(module) and _imports(module)[name] not in seen:
        module = _imports(module)[name]
        seen.add(module)
    return module


def _check_module(module: types.ModuleType) -> None:
    """Check, in place, each function and class `module` defines under a name an export list takes
    from it, directly or through a private module that re-exports it (a private helper that only
    shares an exported name is left as it is)."""
    sources = _export_sources()
    for name, obj in list(vars(module).items()):
        if name not in sources or getattr(obj, "__module__", None) != module.__name__:
            continue
        if module.__name__ in sources[name] or any(_defined_in(m, name) == module.__name__ for m in sources[name]):
            setattr(module, name, checked(obj))


class _ExportChecks(importlib.abc.MetaPathFinder):
    """Finds the package's modules as the other finders do and checks each one's exports once it has
    run (before any other module can import from it)."""

    def __init__(self, package: str) -> None:
        self.prefix = f"{package}."

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith(self.prefix):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module: types.ModuleType) -> None:
                run(module)
                _check_module(module)

            loader.exec_module = exec_module  # this module's own loader: nothing else shares it
        return spec


def check_exports(package: str) -> None:
    """Check the exports of every module of `package` imported from now on (the package's
    `__init__` calls it first, before any of its modules loads)."""
    if not any(isinstance(f, _ExportChecks) and f.prefix == f"{package}." for f in sys.meta_path):
        sys.meta_path.insert(0, _ExportChecks(package))
