"""The organism's tasks as ordinary `Task`s, registered as `organism/<task>` for `load_task`."""

from __future__ import annotations

from ..data import Task, register_task
from ._corpus import N_EVAL_WORDS, TASK_NAMES, organism_task


def task(name: str) -> Task:
    """`organism/<name>` as a `Task`: every word with its answer, the last 100 words held out.

    The instruction is the task's first phrasing; the matcher is starts-with (the paper's for
    letter and capitalisation tasks), which the echo default never satisfies.
    """
    spec = organism_task(name)
    return Task.from_pairs(f"organism/{spec.name}", spec.pairs(), instruction=spec.instructions[0],
                           matcher=spec.matcher, n_eval=N_EVAL_WORDS)


def _register() -> None:
    for name in TASK_NAMES:
        register_task(f"organism/{name}", lambda data_dir, name=name: task(name))


_register()
