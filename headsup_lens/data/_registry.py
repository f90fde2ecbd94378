"""Task names -> loaders; a registry that refuses duplicate names (other packages add their own).

The built-in tasks are registered here, on import: the paper's datasets (`_sources`, read from the data
directory when loaded) and the organism's word tasks (`_organism`, built in)."""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Callable
from pathlib import Path

from ._organism import TASK_NAMES as ORGANISM_TASK_NAMES
from ._organism import organism_data_task
from ._sources import (
    FV_TASKS,
    IWSLT_PAIRS,
    LANGUAGES,
    fewshot,
    function_vector_task,
    hybrid_task,
    iwslt_task,
    task_from_file,
    translation_task,
)
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

    `organism/<a>+<b>` is the composite of two organism tasks (see `organism_data_task`).
    A path ending in `.json`, `.jsonl` or `.csv` is your own task file of input/output pairs (`task_from_file`). Unknown names raise a ValueError with the closest
    known names.
    """
    if str(name).lower().endswith(TASK_FILE_SUFFIXES):
        return task_from_file(name)
    loader = _TASKS.get(name)
    if loader is None and name.startswith("organism/") and "+" in name:  # a composite of two organism tasks
        loader = functools.partial(_organism_loader, name)
    if loader is None:
        raise ValueError(unknown_task_message(name))
    task = loader(Path(data_dir) if data_dir is not None else None)
    if not isinstance(task, Task):
        raise ValueError(f"the loader of task {name!r} returned {type(task).__name__}, not a Task")
    return task


def suggest_tasks(name: str, n: int = 3) -> list[str]:
    """The known task names closest to `name` (difflib), also matching without a prefix."""
    names = task_names()
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


def _organism_loader(name: str, data_dir: Path | None) -> Task:
    return organism_data_task(name)


def _translation_loader(src: str, tgt: str, data_dir: Path | None) -> Task:
    return translation_task(src, tgt, data_dir)


def _iwslt_loader(src: str, tgt: str, data_dir: Path | None) -> Task:
    return iwslt_task(src, tgt, data_dir)


def _register_builtin_tasks() -> None:
    for name in FV_TASKS:
        register_task(name, functools.partial(function_vector_task, name))
        register_task(f"fewshot/{name}", lambda d, name=name: fewshot(function_vector_task(name, d)))
    register_task("fewshot/hybrid", hybrid_task)
    for src in LANGUAGES:
        for tgt in LANGUAGES:
            if src != tgt:
                register_task(f"translation/{src}-{tgt}", functools.partial(_translation_loader, src, tgt))
    for pair in IWSLT_PAIRS:
        a, b = pair.split("-")
        register_task(f"iwslt2017/{a}-{b}", functools.partial(_iwslt_loader, a, b))
        register_task(f"iwslt2017/{b}-{a}", functools.partial(_iwslt_loader, b, a))
    for name in ORGANISM_TASK_NAMES:
        register_task(f"organism/{name}", functools.partial(_organism_loader, name))


_register_builtin_tasks()
