"""How greedy outputs are scored: the paper's protocol (the primary metric), a strict matcher, echo
and empty outputs, label tasks, Wilson intervals and an exact paired test.

The paper (App. B) greedily generates 10 new tokens and counts an output that contains the answer
(that starts with it, for its extraction, capitalisation and letter tasks). Read as a plain substring
test, as the reference code does, that rewards an output that contains the answer inside a longer
word ("unaware" for "aware") or that only repeats the input. `paper_hit`, the primary metric, reads
the same protocol on whole words and does not count an answer that the output copied from the input;
the substring reading stays as `substring_accuracy`, and the strict matcher (the output's first line
is the answer) as a robustness column.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest

from .._validate import check_float, check_int, check_sequence, describe
from ..data import Task
from ._metrics import check_texts, first_line

ECHO_MIN_WORDS = 5  # an output opening with this many consecutive input words copies the input
# A task is a label task when its answers come from a small set: at most MAX_LABELS distinct values,
# each answering LABEL_REPEATS pairs on average (pairs >= LABEL_REPEATS x values). Six antonym pairs
# have six distinct answers: few values, but none repeats, so they are not labels.
MAX_LABELS = 8
LABEL_REPEATS = 3
NO_LABEL = "(none)"  # predicted label of an output that names no label


def normalize(text: str, *, casefold: bool = False) -> str:
    """Unicode-normalised (NFKC) words separated by single spaces: every character that is not a
    letter, digit or underscore separates words ("Washington, D.C." -> "Washington D C"). Case is
    kept unless `casefold` (it is the answer of the capitalisation tasks, and the paper's matcher keeps it)."""
    text = unicodedata.normalize("NFKC", text)
    return " ".join(re.findall(r"\w+", text.casefold() if casefold else text))


def is_strict(output: str, answer: str) -> bool:
    """The strict matcher: the normalised first answer span (the output's first line with any text,
    `first_line`: what follows is usually a new turn or an explanation) equals the normalised answer. Whole
    words only, no substrings ("device" is not "vice", "Tunisia" is not "Tunis"), nothing around
    the answer ("The capital is Paris" is not "Paris")."""
    return normalize(first_line(output)) == normalize(answer) != ""


def paper_hit(output: str, answer: str, user_input: str, matcher: str, echo_min_words: int = ECHO_MIN_WORDS) -> bool:
    """The primary metric: the paper's protocol on whole words, an echo of the input not a hit.

    After `normalize` (case kept, as the paper's matcher keeps it), the answer's words must occur as
    consecutive words of the output (`matcher="contains"`) or be its first words (`"starts_with"`), at an
    occurrence that is not an echo: an occurrence is an echo when a run of the output's words covering it
    also occurs as consecutive words of the input and either has at least min(`echo_min_words`, words of
    the input) words and more words than the answer, or is the whole input. So "unaware" is no hit for
    "aware", an extraction task's output that copies the input sentence from its start is no hit, and
    "Nurbika Mamatuyeva." (the name alone) is one."""
    check_int("echo_min_words", echo_min_words, minimum=1)
    if matcher not in ("contains", "starts_with"):
        raise ValueError(f"matcher must be 'contains' or 'starts_with', got {matcher!r}")
    words, phrase, source = normalize(output).split(), normalize(answer).split(), normalize(user_input).split()
    n = len(phrase)
    if n == 0:
        return False
    starts = [0] if matcher == "starts_with" else range(len(words) - n + 1)
    return any(words[i : i + n] == phrase and not _copied(words, i, n, source, echo_min_words) for i in starts)


def _copied(words: Sequence[str], i: int, n: int, source: Sequence[str], min_words: int) -> bool:
    """Whether `words[i:i + n]` lies inside a copy of the input (`paper_hit`'s echo)."""
    need = max(min(min_words, len(source)), n + 1)
    for start in range(i + 1):
        for end in range(i + n, len(words) + 1):
            run = list(words[start:end])
            if (len(run) >= need or run == list(source)) and _contains_words(source, run):
                return True
    return False


def _contains_words(words: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    return n > 0 and any(list(words[i : i + n]) == list(phrase) for i in range(len(words) - n + 1))


def is_echo(output: str, user_input: str) -> bool:
    """Whether an output repeats the input: after `normalize`, the whole input occurs in the output
    as a run of whole words, or the output's first `ECHO_MIN_WORDS` words are consecutive words of
    the input (a copy of a long input cut by the token budget)."""
    words, source = normalize(output).split(), normalize(user_input).split()
    if _contains_words(words, source):
        return True
    return len(words) >= ECHO_MIN_WORDS and _contains_words(source, words[:ECHO_MIN_WORDS])


def is_empty(output: str) -> bool:
    """An output with no letter or digit (nothing, whitespace or punctuation only)."""
    return normalize(output) == ""


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (scipy); (nan, nan) when n is 0."""
    n = check_int("n", n, minimum=0)
    successes = check_int("successes", successes, minimum=0, maximum=n)
    confidence = check_float("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Exact McNemar test of two paired 0/1 scorings of the same examples: the two-sided binomial
    test of the discordant pairs against 1/2 (1.0 when there are none)."""
    for name, values in (("a", a), ("b", b)):
        check_sequence(name, values, item="bool")
        for i, value in enumerate(values):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name}[{i}] must be True or False, got {describe(value)} ({type(value).__name__})")
    if len(a) != len(b):
        raise ValueError(f"paired scorings need equally many examples, got {len(a)} and {len(b)}")
    only_a = sum(bool(x) and not bool(y) for x, y in zip(a, b))
    only_b = sum(bool(y) and not bool(x) for x, y in zip(a, b))
    return 1.0 if only_a + only_b == 0 else float(binomtest(only_a, only_a + only_b, 0.5).pvalue)


@dataclass(frozen=True)
class Labels:
    """How a label task's outputs map to labels.

    `kind="answer"`: the task's answers come from a small set: at most `MAX_LABELS` (8) distinct
    values over all pairs, and at least `LABEL_REPEATS` (3) pairs per value on average (sentiment,
    ag_news, person-sport, ...; not a file of six antonyms, whose six answers never repeat); the
    labels are those values. `kind="choice"`: every
    input is a comma-separated list and its answer is one of the items (the "X out of 3" tasks);
    the label is the answer's position in the list ("1", "2", ...).
    """

    kind: str
    values: tuple[str, ...]

    def gold(self, user_input: str, answer: str) -> str:
        """The label of a pair: its answer (`kind="answer"`) or the answer's 1-based position in the
        input's comma-separated items (`kind="choice"`).
        """
        if self.kind == "choice":
            return str(_items(user_input).index(normalize(answer, casefold=True)) + 1)
        return answer

    def predicted(self, output: str, user_input: str) -> str:
        """The label whose words occur first in the output (`NO_LABEL` when none does)."""
        words = normalize(output, casefold=True).split()  # "Positive" names the label "positive"
        candidates = (
            {str(i + 1): item for i, item in enumerate(_items(user_input))}
            if self.kind == "choice"
            else {v: normalize(v, casefold=True) for v in self.values}
        )
        first = {label: _first_position(words, phrase.split()) for label, phrase in candidates.items()}
        found = {label: p for label, p in first.items() if p is not None}
        # Earliest occurrence; at the same position the longer phrase ("ice hockey" over "hockey").
        return min(found, key=lambda label: (found[label], -len(candidates[label]))) if found else NO_LABEL


def _items(user_input: str) -> list[str]:
    return [normalize(item, casefold=True) for item in user_input.split(",")]


def _first_position(words: Sequence[str], phrase: Sequence[str]) -> int | None:
    n = len(phrase)
    return next((i for i in range(len(words) - n + 1) if n and list(words[i : i + n]) == list(phrase)), None)


def task_labels(task: Task) -> Labels | None:
    """The label view of a task, or None: see `Labels` for the two kinds and how they are detected."""
    items = [_items(x) for x, _ in task.pairs]
    if all(len(i) > 1 and normalize(y, casefold=True) in i for i, (_, y) in zip(items, task.pairs)):
        return Labels("choice", tuple(str(k + 1) for k in range(max(len(i) for i in items))))
    answers = sorted({y for _, y in task.pairs})
    small_set = len(answers) <= MAX_LABELS and len(task.pairs) >= LABEL_REPEATS * len(answers)
    return Labels("answer", tuple(answers)) if small_set else None


def balanced_accuracy(gold: Sequence[str], predicted: Sequence[str]) -> float:
    """Mean over the gold labels present of the fraction of their examples predicted as that label."""
    check_texts("gold", gold)
    check_texts("predicted", predicted)
    if len(gold) != len(predicted) or not gold:
        raise ValueError(f"need equally many gold and predicted labels, got {len(gold)} and {len(predicted)}")
    recalls = [
        sum(g == p for g, p in zip(gold, predicted) if g == label) / count for label, count in Counter(gold).items()
    ]
    return sum(recalls) / len(recalls)


def instructed_rows_left_out(task: Task) -> str:
    """What `evaluate` says when `task` has no instruction: which rows it leaves out and how a task
    file carries one."""
    return (
        f"task {task.name!r} has no instruction, so the 'instructed' and 'instructed + scaled mask' rows are "
        'left out; a task file carries one as an "instruction" field (CSV: column) on every row, a template '
        "with {input} where the input goes"
    )


def label_counts(labels: Sequence[str]) -> str:
    """Counts of each label as JSON, most frequent first (a CSV-friendly distribution)."""
    return json.dumps(dict(Counter(labels).most_common()))


def majority_label(task: Task, labels: Labels, split: str = "eval") -> str:
    """The most frequent gold label of the training pairs (of `split` when there are none)."""
    indices = task.split_indices("train") if task.n_train and split != "train" else task.split_indices(split)
    counts = Counter(labels.gold(*task.pairs[i]) for i in indices)
    return min(counts, key=lambda label: (-counts[label], label))


def score_outputs(
    task: Task,
    outputs: Sequence[str],
    inputs: Sequence[str],
    answers: Sequence[str],
    labels: Labels | None = None,
) -> tuple[dict[str, float | int | str], dict[str, list]]:
    """Every score of one setting's outputs: (row columns, per-example columns).

    Row: `metric` ("paper"), `accuracy` (the primary metric, `paper_hit` with the task's matcher) and
    `strict` with their 95% Wilson bounds (`accuracy_low` ...), `substring_accuracy` (the reference code's
    plain substring test, `task.is_correct`), `echo` and `empty` counts, and for label tasks
    `balanced_accuracy` (of the predicted labels) and `predicted_labels` (their distribution, JSON).
    Per example: `correct` (the primary metric), `substring`, `strict`, `echo`, `empty` and for label tasks
    `gold_label` / `predicted_label`.
    """
    for name, texts in (("outputs", outputs), ("inputs", inputs), ("answers", answers)):
        check_texts(name, texts)
    if not len(outputs) == len(inputs) == len(answers) or not outputs:
        raise ValueError(
            f"need equally many outputs, inputs and answers, got {len(outputs)}, {len(inputs)}, {len(answers)}"
        )
    n = len(outputs)
    per: dict[str, list] = {  # one entry per output: hits (bool), then the labels (str)
        "correct": [paper_hit(o, a, x, task.matcher) for o, a, x in zip(outputs, answers, inputs)],
        "substring": [task.is_correct(o, a) for o, a in zip(outputs, answers)],
        "strict": [is_strict(o, a) for o, a in zip(outputs, answers)],
        "echo": [is_echo(o, x) for o, x in zip(outputs, inputs)],
        "empty": [is_empty(o) for o in outputs],
    }
    row: dict[str, float | int | str] = {"metric": "paper"}
    for column, key in (("accuracy", "correct"), ("strict", "strict")):
        hits = sum(per[key])
        row[column] = hits / n
        row[f"{column}_low"], row[f"{column}_high"] = wilson_interval(hits, n)
    row["substring_accuracy"] = sum(per["substring"]) / n
    row["echo"], row["empty"] = sum(per["echo"]), sum(per["empty"])
    if labels is not None:
        per["gold_label"] = [labels.gold(x, a) for x, a in zip(inputs, answers)]
        per["predicted_label"] = [labels.predicted(o, x) for o, x in zip(outputs, inputs)]
        row["balanced_accuracy"] = balanced_accuracy(per["gold_label"], per["predicted_label"])
        row["predicted_labels"] = label_counts(per["predicted_label"])
    return row, per
