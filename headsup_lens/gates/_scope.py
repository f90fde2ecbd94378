"""A value that holds for the length of a `with` block (blocks nest: the innermost one holds)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Generic, TypeVar

_T = TypeVar("_T")


class Scope(Generic[_T]):
    """`with scope.holding(value):` makes `scope.current()` return `value` inside the block (None outside
    every block); the value of an outer block holds again when an inner one ends, also after an exception."""

    def __init__(self) -> None:
        self._stack: list[_T] = []

    @contextlib.contextmanager
    def holding(self, value: _T) -> Iterator[None]:
        self._stack.append(value)
        try:
            yield
        finally:
            self._stack.pop()

    def current(self) -> _T | None:
        return self._stack[-1] if self._stack else None
