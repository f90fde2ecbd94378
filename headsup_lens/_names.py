"""Names several floors share that the configs read while a command line is parsed (so importing
them must not import torch): the gates' names."""

from __future__ import annotations

from typing import TypeAlias

Gate: TypeAlias = str
"""Where a mask acts: the name of a registered gate kind (`gates.GATES`: "value", hook_z, the paper's
method; "query", uniform attention, App. C.3.2; any kind registered since). Kinds are registered at
run time, so the name is checked against the registry (`gates.check_gate`), not by its type."""
