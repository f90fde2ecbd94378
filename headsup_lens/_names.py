"""Names several floors share that the configs read while a command line is parsed (so importing
them must not import torch): the gates' names."""

from __future__ import annotations

import typing
from typing import Literal

# Where a mask acts: "value" (hook_z, the paper's method) or "query" (uniform attention, App. C.3.2).
Gate = Literal["value", "query"]
GATES: tuple[str, ...] = typing.get_args(Gate)
