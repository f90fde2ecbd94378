"""Task names -> loaders; a registry that refuses duplicate names (other packages add their own)."""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Callable
from pathlib import Path

from ._task import TASK_FILE_SUFFIXES, Task

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

    Names with a prefix such as `organism/...` first import the module that registers that
    prefix's tasks (`TASK_MODULES`). A path ending in `.json`, `.jsonl` or `.csv` is your own task
    file of input/output pairs (`task_from_file`). Unknown names raise a ValueError with the closest
    known names.
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a task name or a task file path, got {name!r} ({type(name).__name__})")
    if str(name).lower().endswith(TASK_FILE_SUFFIXES):
        from ._sources import task_from_file

        return task_from_file(name)
    if name not in _TASKS and "/" in name:
        _import_prefix(name.split("/", 1)[0])
    if name not in _TASKS:
        raise ValueError(unknown_task_message(name))
    task = _TASKS[name](Path(data_dir) if data_dir is not None else None)
    if not isinstance(task, Task):
        raise ValueError(f"the loader of task {name!r} returned {type(task).__name__}, not a Task")
    return task


# Modules that register tasks under their own prefix when imported.
TASK_MODULES = {"organism": "headsup_lens.organism._tasks"}


def _import_prefix(prefix: str) -> None:
    if prefix in TASK_MODULES:
        importlib.import_module(TASK_MODULES[prefix])


def all_task_names() -> list[str]:
    """Every task name, including those of packages that register on import (`organism/...`)."""
    for prefix in TASK_MODULES:
        _import_prefix(prefix)
    return task_names()


def suggest_tasks(name: str, n: int = 3) -> list[str]:
    """The known task names closest to `name` (difflib), also matching without a prefix."""
    names = all_task_names()
    close = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
    bare = {known.rsplit("/", 1)[-1]: known for known in names if "/" in known}
    for match in difflib.get_close_matches(name.rsplit("/", 1)[-1], list(bare), n=n, cutoff=0.75):
        if bare[match] not in close:
            close.append(bare[match])
    return close[:n]


def unknown_task_message(name: str) -> str:
    suggestions = suggest_tasks(name)
    hint = f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    return (
        f"unknown task {name!r}{hint} (`headsup tasks` lists all {len(task_names())} names; "
        "a task file of your own ends in .json, .jsonl or .csv)"
    )
