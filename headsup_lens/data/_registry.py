"""Task names -> loaders; a registry that refuses duplicate names (other packages add their own)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path

from ._task import Task

# A loader receives the explicit data directory (None: resolve the default) and returns the task.
TaskLoader = Callable[[Path | None], Task]
_TASKS: dict[str, TaskLoader] = {}


def register_task(name: str, loader: TaskLoader) -> None:
    """Make `load_task(name)` call `loader(data_dir)`; a name can be registered only once."""
    if not name or not isinstance(name, str):
        raise ValueError(f"task name must be a non-empty string, not {name!r}")
    if name in _TASKS:
        raise ValueError(f"task {name!r} is already registered")
    _TASKS[name] = loader


def task_names() -> list[str]:
    """Every registered task name, sorted."""
    return sorted(_TASKS)


def load_task(name: str, data_dir: str | os.PathLike | None = None) -> Task:
    """The task registered as `name` (e.g. `"antonym"`, `"translation/en-zh"`, `"fewshot/hybrid"`).

    Names with a prefix such as `organism/...` first import `headsup_lens.organism`, which registers
    its own tasks. Unknown names raise a ValueError listing the known ones.
    """
    if name not in _TASKS and "/" in name:
        package = name.split("/", 1)[0]
        try:
            importlib.import_module(f"headsup_lens.{package}")
        except ImportError:
            pass
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}")
    task = _TASKS[name](Path(data_dir) if data_dir is not None else None)
    if not isinstance(task, Task):
        raise ValueError(f"the loader of task {name!r} returned {type(task).__name__}, not a Task")
    return task
