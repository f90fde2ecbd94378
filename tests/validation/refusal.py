"""Shared check for bad-input tests: the error names the problem, and nothing was written or left hooked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def snapshot(folder: Path | None) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` (hidden ones too) with its bytes and modification time."""
    if folder is None or not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def hook_count(model) -> int:
    return sum(len(h._forward_hooks) + len(h._backward_hooks) for h in model.hook_dict.values())


def assert_refused(
    call: Callable[[], object],
    error: type[Exception] | tuple[type[Exception], ...],
    *fragments: str,
    folder: Path | None = None,
    model=None,
) -> str:
    """`call()` raises `error` whose message contains every fragment; `folder` and `model` are untouched."""
    before = snapshot(folder)
    hooks = hook_count(model) if model is not None else 0
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert snapshot(folder) == before, "a file was created or changed"
    if model is not None:
        assert hook_count(model) == hooks, "hooks were left on the model"
    return message
