"""Sub-commands are dataclass configs paired with a function; the parser is generated from them.

Each field's docstring becomes its `--help` text, so the CLI and the library cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    name: str
    config: type
    run: Callable[[Any], int | None]
    help: str


COMMANDS: dict[str, Command] = {}


def command(name: str, config: type, help: str) -> Callable[[Callable], Callable]:
    """Register `run(config) -> exit code` as `headsup NAME`; names must be unique."""

    def register(run: Callable) -> Callable:
        if name in COMMANDS:
            raise ValueError(f"command {name!r} is registered twice")
        COMMANDS[name] = Command(name, config, run, help)
        return run

    return register
