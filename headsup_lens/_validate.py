"""Checks at the public boundary: bad input fails before any work, with a message that names it.

Every helper raises `TypeError` (wrong kind of value) or `ValueError` (right kind, not allowed) with
the argument's name, the value it got and what is allowed, and returns the value in the form the
caller should use (an `int`, a `float`, a float tensor). Nothing here writes anything.

torch is imported only by the tensor checks: the configs check their scalars here while the command
line is read, and `--help` must not wait for torch.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from torch import Tensor

from ._formats import describe as describe  # defined there: the file readers must not import torch

# How many offending entries an error message lists before it stops.
_SHOWN = 3


def _type_name(value: Any) -> str:
    return type(value).__name__


def _scalar_tensor(value: Any) -> bool:
    """True for a one-element real, non-bool tensor (a tensor exists only once torch is imported)."""
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and isinstance(value, torch.Tensor)
        and value.numel() == 1
        and not value.is_complex()
        and value.dtype != torch.bool
    )


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an `int`; bools, floats (even 3.0) and strings are a TypeError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        tensor: Any = value
        if _scalar_tensor(tensor) and tensor.ndim == 0 and not tensor.is_floating_point():
            value = int(tensor)
        else:
            raise TypeError(f"{name} must be an integer, got {describe(value)} ({_type_name(value)})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    finite: bool = True,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """`value` as a `float` in `[low, high]` (bounds `None` are open; `*_open` excludes a bound).

    Integers are accepted (1 means 1.0); bools, strings and tensors of more than one element are a
    TypeError; NaN and infinities are a ValueError when `finite`.
    """
    if _scalar_tensor(value):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {describe(value)} ({_type_name(value)})")
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must lie in {_interval(low, high, low_open, high_open)}, got {value}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name} must lie in {_interval(low, high, low_open, high_open)}, got {value}")
    return value


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    left = "(-inf" if low is None else f"{'(' if low_open else '['}{low:g}"
    right = "inf)" if high is None else f"{high:g}{')' if high_open else ']'}"
    return f"{left}, {right}"


def check_batch_fits(batch_size: int, rows: int, what: str, name: str = "batch_size") -> None:
    """A step's batch draws `batch_size` rows from `rows` distinct examples (`what`: "training pairs of
    antonym"). More rows than there are examples would repeat examples within each step: the time of a
    huge batch for the data of a small one (`batch_size=1_000_000` on 140 pairs ran for minutes), and
    a recipe that is not what it says. A ValueError names the largest batch the data allows; every
    trainer checks its batch here, before any work."""
    if batch_size > rows:
        raise ValueError(
            f"{name} {batch_size} is larger than the {rows} {what} it draws from (every step would repeat "
            f"them); use {name} {rows} or less"
        )


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """`value` must be one of `choices`."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {describe(value)}")
    return value


# The device strings a model can be loaded on.
DEVICE_FORMS = "cpu, cuda or cuda:N (N: a GPU index)"
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def check_device(name: str, value: Any) -> str:
    """A device string in the form torch reads, lower case ("CPU" is "cpu"); anything else (gpu,
    mps, meta, ...) is a ValueError listing the accepted forms."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string ({DEVICE_FORMS}), got {describe(value)} ({_type_name(value)})")
    form = value.strip().lower()
    if not _DEVICE.fullmatch(form):
        raise ValueError(f"{name} must be {DEVICE_FORMS}, got {value!r}")
    return form


def cuda_missing() -> str | None:
    """Why this machine cannot run on CUDA, or None when it may. torch answers when it is loaded;
    before that (its import takes seconds), the cheapest signs: a CPU build of torch (its `version.py`
    names no CUDA, read without importing torch) or no CUDA driver library. A machine that passes here
    may still lack a GPU: loading the model then says so."""
    if "torch" in sys.modules:
        return None if sys.modules["torch"].cuda.is_available() else "torch finds no CUDA device"
    build = _torch_build()
    if build is not None and build.get("cuda") is None and build.get("hip") is None:
        return f"torch {build.get('__version__', '')} is a CPU build"
    import ctypes
    import ctypes.util

    names = (
        ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda")]
    )
    for library in filter(None, names):
        try:
            ctypes.CDLL(library)
        except OSError:
            continue
        return None
    return "no CUDA driver is installed"


def _torch_build() -> dict[str, Any] | None:
    """The literal fields of torch's `version.py` (`__version__`, `cuda`, `hip`, ...) read from its
    source without importing torch; None when torch or the file is not found or not as expected."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    try:
        tree = ast.parse((Path(locations[0]) / "version.py").read_text(encoding="utf-8"))
    except (IndexError, OSError, SyntaxError, ValueError):
        return None
    fields: dict[str, Any] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            try:
                fields[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return fields if "cuda" in fields else None


def check_device_available(name: str, value: str | None) -> None:
    """A ValueError when `value` (a device string, checked by `check_device`) asks for CUDA on a machine
    that has none (`cuda_missing`); None (the default device) and cpu always pass."""
    if value is None or not value.startswith("cuda"):
        return
    reason = cuda_missing()
    if reason is not None:
        raise ValueError(f"{name} {value} was asked for but CUDA is not available on this machine ({reason}); use cpu")


def check_tensor(name: str, value: Any) -> Tensor:
    """`value` must be a real-valued tensor; bool and integer tensors come back as float32.

    Floating tensors are returned unchanged (same dtype, device and autograd graph).
    """
    import torch  # a tensor check: torch is loaded already

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {describe(value)} ({_type_name(value)})")
    if value.is_complex():
        raise TypeError(f"{name} must be real-valued, got a {value.dtype} tensor")
    return value if value.is_floating_point() else value.float()


def check_shape(name: str, tensor: Tensor, *allowed: str, **sizes: int) -> str:
    """Check `tensor.shape` against jaxtyping-like patterns; return the pattern that matched.

    Each pattern names its dimensions (`"n_layers n_heads"`, `"batch n_layers n_heads"`); a name in
    `sizes` must have that size, other names take any size (but the same size wherever they repeat).
    """
    shape = tuple(tensor.shape)
    for pattern in allowed:
        dims = pattern.split()
        if len(dims) != len(shape):
            continue
        seen: dict[str, int] = dict(sizes)
        if all(seen.setdefault(dim, size) == size for dim, size in zip(dims, shape)):
            return pattern
    expected = " or ".join(
        f"[{', '.join(p.split())}] = [{', '.join(str(sizes.get(d, d)) for d in p.split())}]" for p in allowed
    )
    raise ValueError(f"{name} has shape {list(shape)}, which does not fit {expected}")


def check_finite(name: str, tensor: Tensor) -> None:
    """No NaN or infinite entries; the message gives how many and where the first ones are."""
    values = tensor.detach()
    bad = ~values.isfinite()
    if bad.any():
        raise ValueError(f"{name} must be finite (no NaN or infinity), but {_where(values, bad)}")


def check_mask_values(name: str, tensor: Tensor) -> None:
    """Finite and within [0, 1]: 1 keeps a head, 0 removes it, values between scale it."""
    check_finite(name, tensor)
    values = tensor.detach()
    bad = (values < 0) | (values > 1)
    if bad.any():
        raise ValueError(
            f"{name} must lie in [0, 1] (1 keeps a head, 0 removes it, values between scale it), "
            f"but {_where(values, bad)}"
        )


def _where(values: Tensor, bad: Tensor) -> str:
    positions = bad.nonzero()[:_SHOWN].tolist()
    shown = ", ".join(f"{values[tuple(p)].item():g} at {tuple(p) if len(p) != 1 else p[0]}" for p in positions)
    count = int(bad.sum())
    more = f" (first {_SHOWN} shown)" if count > _SHOWN else ""
    return f"{count} of {values.numel()} entries are not: {shown}{more}"


def check_unicode(name: str, text: str) -> None:
    """Text must be valid Unicode: invalid UTF-8 on a command line arrives as lone surrogates."""
    bad = [c for c in text if "\ud800" <= c <= "\udfff"]
    if bad:
        raise ValueError(f"{name} is not valid UTF-8 text: {len(bad)} undecodable byte(s) in {describe(text)}")


def check_out_dir(path: str | os.PathLike, name: str = "out_dir") -> Path:
    """An output folder that exists and is writable, or that could be created; creates nothing.

    A file in its place (or in place of a parent), a symbolic link to nowhere (or a link loop), a
    read-only folder or filesystem are a ValueError naming the path (`name`: the argument, or the
    command-line option), raised before any work is done.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {describe(path)} ({_type_name(path)})")
    if os.fspath(path) == "":  # Path("") is "." (the current folder): refused, not taken as it
        raise ValueError(f"{name} is empty ''; pass a folder path ('.' for the current folder)")
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a file, not a folder; pass a folder path")
    existing = path
    while not existing.exists():
        if os.path.lexists(existing):  # a link to nowhere (or a loop) would fail late with "File exists"
            raise ValueError(
                f"{name} {str(path)!r} cannot be created: {str(existing)!r} is a symbolic link to a missing "
                "target (or a link loop)"
            )
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != path and not existing.is_dir():
        raise ValueError(f"{name} {str(path)!r} cannot be created: {str(existing)!r} is a file, not a folder")
    if not _writable(existing):
        where = "it" if existing == path else f"its nearest existing parent {str(existing)!r}"
        raise ValueError(
            f"{name} {str(path)!r} cannot be written: {where} is not writable; pass a folder you can write to"
        )
    return path


def check_out_file(path: str | os.PathLike, name: str = "path") -> Path:
    """An output file path: not a folder, and its folder is a valid output folder (creates nothing)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {describe(path)} ({_type_name(path)})")
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a folder; pass a file path")
    check_out_dir(path.parent, name=f"the folder of {name}")
    return path


def _writable(folder: Path) -> bool:
    # os.access ignores read-only mounts for some filesystems and always says yes to root; a probe
    # file removed at once is the only reliable answer.
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        fd, probe = tempfile.mkstemp(prefix=".headsup-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def check_sequence(name: str, value: Any, *, item: str = "item") -> Sequence:
    """A list or tuple (a string is refused although it is a sequence)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list or tuple of {item}s, got {describe(value)} ({_type_name(value)})")
    return value


def non_finite_fields(config: Any) -> list[str]:
    """The fields of a dataclass `config` whose value is a NaN or infinite float (sorted by name).

    Range checks (`lr > 0`, ...) let infinities through and compare NaN as False with a message about
    the range, not the cause; a recipe checks this first.
    """
    return sorted(
        f.name
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), float) and not math.isfinite(getattr(config, f.name))
    )


def check_ranges(config: Any, ok: dict[str, bool], allowed: dict[str, str] | None = None) -> None:
    """The one range check of a recipe's `__post_init__`: a ValueError naming every field that is NaN
    or infinite, or whose entry in `ok` is False, with its value and what is allowed (`allowed[name]`,
    default ">= 0"): `steps must be > 0, got 0; lr must be finite (not NaN or infinite), got nan`."""
    infinite = set(non_finite_fields(config))
    bad = [f"{name} must be finite (not NaN or infinite), got {getattr(config, name)}" for name in sorted(infinite)]
    bad += [
        f"{name} must be {(allowed or {}).get(name, '>= 0')}, got {getattr(config, name)!r}"
        for name, fine in ok.items()
        if not fine and name not in infinite
    ]
    if bad:
        raise ValueError(f"{type(config).__name__}: {'; '.join(bad)}")


_Entry = TypeVar("_Entry")
_Fn = TypeVar("_Fn", bound=Callable)


def registrar(
    table: MutableMapping[str, _Entry], what: str, name: str, entry: Callable[[_Fn], _Entry]
) -> Callable[[_Fn], _Fn]:
    """A decorator that files `entry(function)` in `table` under `name` and returns the function
    unchanged; a name already in the table is refused (`what` names the kind of entry)."""

    def register(function: _Fn) -> _Fn:
        if name in table:
            raise ValueError(f"{what} {name!r} is registered twice")
        table[name] = entry(function)
        return function

    return register
