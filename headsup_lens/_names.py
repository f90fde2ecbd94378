"""Names several floors share that the configs read while a command line is parsed (so importing
them must not import torch): the gates' names, a task's name as a file name."""

from __future__ import annotations

import re
import typing
from typing import Literal

from ._typecheck import checked

# Where a mask acts: "value" (hook_z, the paper's method) or "query" (uniform attention, App. C.3.2).
Gate = Literal["value", "query"]
GATES: tuple[str, ...] = typing.get_args(Gate)


@checked
def safe_name(name: str) -> str:
    """A task name as a file name (`translation/en-zh` -> `translation__en-zh`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", name)
