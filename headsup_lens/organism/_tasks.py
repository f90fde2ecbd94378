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
    return Task.from_pairs(
        f"organism/{spec.name}",
        spec.pairs(),
        instruction=spec.instructions[0],
        matcher=spec.matcher,
        n_eval=N_EVAL_WORDS,
    )


def composite_task(first: str, second: str) -> Task:
    """`organism/<first>+<second>`: `second`'s answer applied to `first`'s answer (e.g. plural then
    uppercase: "box" -> "BOXES"), every word, the last 100 held out as in `task`. The instruction
    joins the two tasks' first phrasings ("Plural then uppercase: {input}"). No organism is trained
    on it: it is the composite task of the SFT composition test."""
    a, b = organism_task(first), organism_task(second)
    if a.name == b.name:
        raise ValueError(f"a composite needs two different tasks, got {first!r} twice")
    label = lambda spec: spec.instructions[0].split(":")[0]  # noqa: E731 - "Plural: {input}" -> "Plural"
    instruction = f"{label(a)} then {label(b).lower()}: {{input}}"
    pairs = [(word, b.answer(a.answer(word))) for word, _ in a.pairs()]
    return Task.from_pairs(
        f"organism/{a.name}+{b.name}", pairs, instruction=instruction, matcher="starts_with", n_eval=N_EVAL_WORDS
    )


def _register() -> None:
    for name in TASK_NAMES:
        register_task(f"organism/{name}", lambda data_dir, name=name: task(name))


_register()
