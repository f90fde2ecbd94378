"""Warnings attributed to the caller's line, not to the library or its type-checking wrappers."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

# Frames from these folders are skipped: the package itself and the decorators wrapping its functions.
_INTERNAL = (str(Path(__file__).parent),)
_WRAPPERS = ("jaxtyping", "beartype", "typeguard")


def _internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL) or any(
        f"{sep}{name}{sep}" in filename for name in _WRAPPERS for sep in ("/", "\\")
    )


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn` with the stack level of the first frame outside headsup_lens and its wrappers,
    so the warning names the user's line however deep inside the package it was raised."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)
