"""The paper's protocol as the primary metric (`paper_hit`): its echo rule, and an independent
re-implementation of it that rescores every committed generation table and agrees with the committed
`correct` column on every output and with `accuracy` within 0.005 on every row of the tables scored
from them."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens.data import load_task
from headsup_lens.evaluation import paper_hit

FIGURES = Path(__file__).resolve().parents[2] / "figures"
KEYS = ("task", "mask_task", "setting", "prompt", "gate", "mask", "draw", "step", "shots")


# ------------------------------------------------------------------ an independent reading of App. B
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", unicodedata.normalize("NFKC", text))


def reference_hit(output: str, answer: str, user_input: str, matcher: str, min_words: int = 5) -> bool:
    """The protocol written again another way: every run of the input's words in a set, each answer
    occurrence an echo when some run of output words through it is in that set and is long (at least
    min(min_words, |input|) words and longer than the answer) or the whole input."""
    out, ans, src = _words(output), _words(answer), _words(user_input)
    n = len(ans)
    if not n:
        return False
    runs = {tuple(src[a:b]) for a in range(len(src)) for b in range(a + 1, len(src) + 1)}
    need = max(min(min_words, len(src)), n + 1)

    def echo(i: int) -> bool:
        for s in range(i + 1):
            for e in range(i + n, len(out) + 1):
                run = tuple(out[s:e])
                if run in runs and (len(run) >= need or list(run) == src):
                    return True
        return False

    places = [0] if matcher == "starts_with" else range(len(out) - n + 1)
    return any(out[i : i + n] == ans and not echo(i) for i in places)


# ------------------------------------------------------------------ the echo rule, by examples
@pytest.mark.parametrize(
    ("output", "answer", "user_input", "matcher", "hit"),
    [
        ("unaware of it", "aware", "aware", "contains", False),  # whole words: no substring hit
        ("I am aware", "aware", "unaware", "contains", True),
        ("Nurbika Mamatuyeva.", "Nurbika Mamatuyeva", "Nurbika Mamatuyeva won the race in Paris", "starts_with", True),
        # the input copied from its start: the name lies inside a long copy, no hit
        (
            "Nurbika Mamatuyeva won the race in",
            "Nurbika Mamatuyeva",
            "Nurbika Mamatuyeva won the race in Paris",
            "starts_with",
            False,
        ),
        ("hot", "hot", "hot", "contains", False),  # the whole input repeated is an echo
        ("cold hot", "cold", "hot", "contains", True),
        ("Paris is the capital", "paris", "France", "contains", False),  # case kept, as the paper's matcher
        ("The answer: Paris", "Paris", "France", "starts_with", False),
        ("The answer: Paris", "Paris", "France", "contains", True),
    ],
)
def test_the_echo_rule_on_examples(output, answer, user_input, matcher, hit):
    assert paper_hit(output, answer, user_input, matcher) is hit
    assert reference_hit(output, answer, user_input, matcher) is hit


WORD = st.sampled_from(["a", "b", "c", "Paris", "name", "x1"])
TEXT = st.lists(WORD, max_size=9).map(" ".join)


@given(TEXT, st.lists(WORD, min_size=1, max_size=3).map(" ".join), TEXT, st.sampled_from(["contains", "starts_with"]))
def test_paper_hit_agrees_with_the_independent_reading(output, answer, user_input, matcher):
    assert paper_hit(output, answer, user_input, matcher) == reference_hit(output, answer, user_input, matcher)


@given(TEXT, st.lists(WORD, min_size=1, max_size=3).map(" ".join))
def test_an_output_that_is_the_input_is_never_a_hit(text, answer):
    assert not paper_hit(text, answer, text, "contains")


@given(st.lists(WORD, min_size=1, max_size=3).map(" ".join), TEXT)
def test_the_answer_alone_is_a_hit_unless_it_is_the_input(answer, user_input):
    expected = _words(answer) != _words(user_input)
    assert paper_hit(answer + ".", answer, user_input, "starts_with") is expected


@given(TEXT, st.lists(WORD, min_size=1, max_size=3).map(" ".join), TEXT)
def test_starts_with_is_stricter_than_contains(output, answer, user_input):
    if paper_hit(output, answer, user_input, "starts_with"):
        assert paper_hit(output, answer, user_input, "contains")


# ------------------------------------------------------------------ every committed table
@cache
def _matcher(task: str) -> str:
    return load_task(task).matcher


def _read(path: Path) -> pd.DataFrame:
    text = dict.fromkeys(("input", "answer", "output", "setting", "task", "mask_task", "mask", "prompt", "gate"), str)
    return pd.read_csv(path, keep_default_na=False, na_values={"accuracy": [""]}, dtype=text)


def _scored_generations() -> list[Path]:
    found = []
    for path in sorted(FIGURES.rglob("*generations*.csv*")):
        columns = pd.read_csv(path, nrows=0).columns
        if {"input", "answer", "output", "correct"} <= set(columns) and "task" in columns:
            found.append(path)
    return found


GENERATIONS = _scored_generations()


def test_the_committed_generations_are_many():
    # every settings, few-shot, cross-task and random-mask table, and the score tables computed from them
    assert len(GENERATIONS) >= 40
    assert sum(len(_tables_of(p)) for p in GENERATIONS) >= 60


@pytest.mark.parametrize("path", GENERATIONS, ids=lambda p: str(p.relative_to(FIGURES)))
def test_every_committed_output_is_scored_by_the_papers_protocol(path):
    frame = _read(path)
    if (frame.output.str.len() == 0).all():
        pytest.fail(f"{path}: no outputs")
    hits = [
        reference_hit(o, a, x, _matcher(t)) for o, a, x, t in zip(frame.output, frame.answer, frame.input, frame.task)
    ]
    stored = frame.correct.astype(str).str.lower().eq("true")
    wrong = frame.loc[stored.to_numpy() != pd.Series(hits).to_numpy()]
    assert wrong.empty, (
        f"{path}: {len(wrong)} outputs scored otherwise, e.g. {wrong.iloc[0][['output', 'answer']].tolist()}"
    )
    tables = _tables_of(path)
    for table_path in tables:
        _check_accuracy(table_path, frame.assign(hit=hits))


def _tables_of(path: Path) -> list[Path]:
    """The score tables computed from a generations table, by the folder's naming."""
    name = re.sub(r"\.csv(\.gz)?$", "", path.name)
    candidates = {
        name.replace("_generations", "_evaluation"),
        name.replace("generations_", "evaluation_"),
        name.replace("_generations", ""),
    }
    return [path.parent / f"{c}.csv" for c in sorted(candidates) if c != name and (path.parent / f"{c}.csv").is_file()]


def _check_accuracy(table_path: Path, generations: pd.DataFrame) -> None:
    table = _read(table_path)
    if "accuracy" not in table or "metric" not in table:
        return
    keys = [k for k in KEYS if k in table.columns and k in generations.columns]
    for _, row in table.iterrows():
        if row.metric != "paper" or pd.isna(row.accuracy):
            continue
        part = generations
        for k in keys:  # "-": a row of the full model in a gate or mask table, its outputs stored once per value
            if row[k] != "-":
                part = part.loc[part[k].astype(str) == str(row[k])]
            elif len(part):
                part = part.loc[part[k] == part[k].iloc[0]]
        assert len(part), f"{table_path}: no outputs of row {dict(row[keys])}"
        assert abs(part.hit.mean() - row.accuracy) <= 0.005, f"{table_path}: row {dict(row[keys])}"
