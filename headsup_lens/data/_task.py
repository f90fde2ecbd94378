"""`Task`: (input, output) pairs, an optional instruction template and the rule that grades an answer."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._typecheck import advise

Pair = tuple[str, str]
Shots = tuple[Pair, ...]
MATCHERS = ("contains", "starts_with")
N_EVAL = 100  # the paper holds out the last 100 examples of every dataset
# Own task files (`load_task("my_task.jsonl")`): input/output pairs as JSON, JSON lines or CSV.
TASK_FILE_SUFFIXES = (".json", ".jsonl", ".csv")


@dataclass(frozen=True)
class Task:
    """A task the model should perform from the bare input, without an instruction.

    `pairs` are `(input, output)`; the last `n_eval` are held out for evaluation (`eval_pairs`), the
    rest are `train_pairs`. `instruction` is the instructed user text as a template with `{input}`
    (e.g. `"{input}\\n\\nTranslate into Chinese:"`), used by the "w/ instruction" baseline.
    `matcher` grades a generation: `"contains"` the answer or `"starts_with"` it.
    `char_level` scores ROUGE on characters (Chinese). `shots`, when set, gives each pair its own
    demonstrations `((x, y), ...)`, rendered as earlier chat turns with the model's template.
    `max_new_tokens` is the greedy generation budget (10 for the paper's simple tasks; longer for
    sentence translation). `target_language` (an ISO 639-1 code) marks a translation task: it is
    always scored with ROUGE-L and BLEU, and by the share of outputs in that language.
    `paper_steps` is the paper's number of training steps for the task when it differs from the
    default recipe's (6 190 = 10 epochs over 9 900 XNLI pairs); the paper preset uses it.
    """

    name: str
    pairs: tuple[Pair, ...]
    instruction: str | None = None
    matcher: str = "contains"  # "contains" | "starts_with"; checked in __post_init__ with a clear error
    n_eval: int = N_EVAL
    char_level: bool = False
    shots: tuple[Shots, ...] | None = None
    max_new_tokens: int = 10
    target_language: str | None = None
    paper_steps: int | None = None

    def __post_init__(self) -> None:
        for i, pair in enumerate(self.pairs):  # every pair (the signature's type check samples one)
            if not (len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str)):
                raise TypeError(
                    f"task {self.name!r}: pairs[{i}] must be an (input, output) pair of strings, got {pair!r:.120}"
                )
        pairs = tuple((x, y) for x, y in self.pairs)
        object.__setattr__(self, "pairs", pairs)
        if not pairs:
            raise ValueError(f"task {self.name!r} has no (input, output) pairs")
        if self.matcher not in MATCHERS:
            raise ValueError(f"task {self.name!r}: matcher must be one of {MATCHERS}, not {self.matcher!r}")
        if self.instruction is not None and "{input}" not in self.instruction:
            raise ValueError(f"task {self.name!r}: instruction template {self.instruction!r} lacks '{{input}}'")
        if not 0 <= self.n_eval <= len(pairs):
            raise ValueError(
                f"task {self.name!r}: n_eval={self.n_eval} must lie in [0, {len(pairs)}] (number of pairs)"
            )
        if self.max_new_tokens < 1:
            raise ValueError(f"task {self.name!r}: max_new_tokens must be positive, got {self.max_new_tokens}")
        if self.paper_steps is not None and self.paper_steps < 1:
            raise ValueError(f"task {self.name!r}: paper_steps must be positive, got {self.paper_steps}")
        if self.shots is not None:
            shots = tuple(tuple((str(x), str(y)) for x, y in s) for s in self.shots)
            if len(shots) != len(pairs):
                raise ValueError(f"task {self.name!r}: {len(shots)} demonstration lists for {len(pairs)} pairs")
            object.__setattr__(self, "shots", shots)

    @classmethod
    def from_pairs(
        cls,
        name: str,
        pairs: Sequence,
        instruction: str | None = None,
        matcher: str = "contains",
        n_eval: int | None = None,
        char_level: bool = False,
    ) -> Task:
        """A task from your own data; `n_eval` defaults to min(100, half the pairs).

        An input has one answer: an input repeated with another answer is a ValueError, and so is a
        pair repeated on both sides of the split (it would be held out after being trained on). A
        pair repeated within one split is kept, each copy counting once (in training, a heavier
        weight; in evaluation, a second row). The paper's own datasets, which repeat some inputs,
        are read by `load_task` without this rule.
        """
        pairs = list(pairs)
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise ValueError(f"task {name!r}: pair {i} is not an (input, output) pair: {pair!r}")
        if n_eval is None:
            n_eval = min(N_EVAL, len(pairs) // 2)
        task = cls(name, tuple(tuple(p) for p in pairs), instruction, matcher, n_eval, char_level)
        _refuse_leaking_repeats(task)
        return task

    # ----------------------------------------------------------------- splits
    @property
    def n_train(self) -> int:
        """How many pairs are for training: all `pairs` but the last `n_eval`."""
        return len(self.pairs) - self.n_eval

    @property
    def train_pairs(self) -> tuple[Pair, ...]:
        """The training `(input, answer)` pairs: all of `pairs` but the last `n_eval`."""
        return self.pairs[: self.n_train]

    @property
    def eval_pairs(self) -> tuple[Pair, ...]:
        """The held-out `(input, answer)` pairs: the last `n_eval` of `pairs`."""
        return self.pairs[self.n_train :]

    def split_indices(self, split: str) -> range:
        """Indices into `pairs` of `"train"`, `"eval"` or `"all"`; an empty split is an error."""
        ranges = {
            "train": range(self.n_train),
            "eval": range(self.n_train, len(self.pairs)),
            "all": range(len(self.pairs)),
        }
        if split not in ranges:
            raise ValueError(f"split must be one of {sorted(ranges)}, not {split!r}")
        if len(ranges[split]) == 0:
            raise ValueError(f"task {self.name!r} has no {split} pairs ({len(self.pairs)} pairs, n_eval={self.n_eval})")
        return ranges[split]

    # ----------------------------------------------------------------- prompts and grading
    @property
    def is_translation(self) -> bool:
        """Whether the task is a translation (it has a `target_language`)."""
        return self.target_language is not None

    @property
    def has_shots(self) -> bool:
        """Whether the task carries few-shot demonstrations (`shots`)."""
        return self.shots is not None

    def demonstrations(self, index: int) -> Shots:
        """The demonstration turns shown before pair `index` (none for zero-shot tasks)."""
        return self.shots[index] if self.shots is not None else ()

    def user_text(self, x: str, instructed: bool = False) -> str:
        """The user turn: the bare input, or the instruction template filled with it."""
        if not instructed:
            return x
        if self.instruction is None:
            raise ValueError(f"task {self.name!r} has no instruction template; it cannot be run instructed")
        return self.instruction.replace("{input}", x)  # not str.format: inputs may contain braces

    def is_correct(self, generation: str, answer: str) -> bool:
        """The paper's grading: the answer is contained in (or starts) the generated text."""
        answer = answer.strip()
        if self.matcher == "starts_with":
            return generation.strip().startswith(answer)
        return answer in generation

    def __repr__(self) -> str:
        return (
            f"Task({self.name!r}, {len(self.pairs)} pairs ({self.n_train} train / {self.n_eval} eval), "
            f"matcher={self.matcher!r}, instructed={'yes' if self.instruction else 'no'}"
            f"{', few-shot' if self.shots else ''})"
        )


def _refuse_leaking_repeats(task: Task) -> None:
    """An input with two answers, or a pair on both sides of the split: a ValueError naming both pairs."""
    first: dict[str, int] = {}
    for i, (x, y) in enumerate(task.pairs):
        j = first.setdefault(x, i)
        if j == i:
            continue
        if task.pairs[j][1] != y:
            raise ValueError(
                f"task {task.name!r}: pairs[{i}] gives input {x!r:.80} the answer {y!r:.80}, but pairs[{j}] gave it "
                f"{task.pairs[j][1]!r:.80}; an input has one answer (remove one of the two pairs)"
            )
        if (j < task.n_train) != (i < task.n_train):
            raise ValueError(
                f"task {task.name!r}: pairs[{i}] repeats pairs[{j}] ({x!r:.80}, {y!r:.80}) across the split "
                f"(the last n_eval={task.n_eval} pairs are held out), so a held-out pair would also be trained "
                "on; remove the repeat or keep the copies in one split"
            )


def _load_task_first(value: object) -> str | None:
    if isinstance(value, str):
        return f"load it first: hl.load_task({value!r})"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return f"load them first: [hl.load_task(name) for name in {list(value)!r}]"
    return None


advise(Task, _load_task_first)  # a task's name where a Task is wanted: the call that loads it


def safe_name(name: str) -> str:
    """A task name as a file name (`translation/en-zh` -> `translation__en-zh`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", name)
