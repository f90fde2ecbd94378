"""Metrics take lists of texts (one string is a TypeError, not a text scored character by character),
of equal lengths; label tasks are recognised by a sound rule; `evaluate` says which rows it leaves out."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import EvalConfig, HeadMask
from headsup_lens.data import Task, load_task
from headsup_lens.evaluation import (
    balanced_accuracy,
    bleu,
    evaluate,
    mcnemar_exact,
    paper_bleu,
    paper_bleu_scores,
    paper_rouge_l,
    paper_rouge_l_scores,
    rouge_l,
    score_outputs,
    target_language_share,
    task_labels,
    wilson_interval,
)

TASK = Task.from_pairs("t", [("hot", "cold"), ("big", "small"), ("up", "down"), ("in", "out")])
PAIRED = [rouge_l, bleu, paper_rouge_l, paper_rouge_l_scores, paper_bleu, paper_bleu_scores, balanced_accuracy]


@pytest.mark.parametrize("metric", PAIRED, ids=lambda f: f.__name__)
def test_one_string_is_not_a_list_of_texts(metric):
    # "cold" against "hold" used to be four one-character texts scored pairwise (3 of 4 matching).
    with pytest.raises(TypeError, match="one string is not accepted as a sequence"):
        metric("cold", "hold")
    with pytest.raises(TypeError, match="one string is not accepted as a sequence"):
        metric("cold", ["cold"])
    with pytest.raises(TypeError, match="one string is not accepted as a sequence"):
        metric(["cold"], "cold")
    # The type check samples one item of a list (the tests' jaxtyping hook checks more); every item
    # is checked before any scoring.
    with pytest.raises(
        TypeError, match=r"\[1\] must be a string, got 3|does not have the type it needs|Type-check error"
    ):
        metric(["cold", 3], ["cold", "hot"])


@pytest.mark.parametrize("metric", PAIRED, ids=lambda f: f.__name__)
def test_predictions_and_references_must_pair_up(metric):
    with pytest.raises(ValueError, match="equally many"):
        metric(["cold", "small"], ["cold"])
    with pytest.raises(ValueError, match="equally many"):
        metric([], [])


def test_the_other_scoring_functions_refuse_a_string_too():
    with pytest.raises(TypeError, match="one string is not accepted as a sequence"):
        score_outputs(TASK, "cold", ["hot"], ["cold"])
    with pytest.raises(TypeError, match="one string is not accepted as a sequence"):
        target_language_share("Bonjour", "fr")
    with pytest.raises(
        TypeError, match=r"a\[1\] must be True or False, got 'false'|does not have the type|Type-check error"
    ):
        mcnemar_exact([True, "false"], [True, True])
    with pytest.raises(ValueError, match="successes must be <= 3"):
        wilson_interval(4, 3)
    assert target_language_share(["Bonjour tout le monde, comment allez-vous ?"], "fr") == 1.0


# ---------------------------------------------------------------------- label tasks (issue 36)
def test_six_antonym_pairs_are_not_a_label_task():
    antonyms = Task.from_pairs(
        "antonym", [("hot", "cold"), ("big", "small"), ("up", "down"), ("in", "out"), ("old", "new"), ("wet", "dry")]
    )
    assert task_labels(antonyms) is None
    sentiment = Task.from_pairs("s", [(f"text {i}", "positive" if i % 2 else "negative") for i in range(6)])
    assert task_labels(sentiment).values == ("negative", "positive")
    # Eight labels need 24 pairs; 23 pairs with eight distinct answers are not enough repeats.
    eight = [f"l{i % 8}" for i in range(24)]
    assert task_labels(Task.from_pairs("e", [(f"x{i}", y) for i, y in enumerate(eight)])).kind == "answer"
    assert task_labels(Task.from_pairs("e", [(f"x{i}", y) for i, y in enumerate(eight[:23])])) is None


NO_TEXT = EvalConfig(generate=False, progress=False)


def test_a_small_antonym_file_gets_no_majority_label_row(llama, tmp_path):
    words = [("abc", "cba"), ("hello", "olleh"), ("xy", "yx"), ("tail", "liat"), ("q", "q"), ("dog", "god")]
    (tmp_path / "antonym.json").write_text(json.dumps([{"input": x, "output": y} for x, y in words]))
    task = load_task(str(tmp_path / "antonym.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = evaluate(llama, task, HeadMask.full(llama), EvalConfig(max_new_tokens=2, progress=False)).table
        with pytest.raises(ValueError, match="'majority label' needs a label task"):
            evaluate(llama, task, HeadMask.full(llama), EvalConfig(settings=("original", "majority label")))
    assert "majority label" not in table.setting.tolist() and "echo baseline" in table.setting.tolist()
    assert "balanced_accuracy" not in table


def test_evaluate_says_when_it_leaves_the_instructed_rows_out(llama, tmp_path):
    rows = [{"input": w, "output": w[::-1]} for w in ["abc", "hello", "xy", "tail"]]
    (tmp_path / "bare.json").write_text(json.dumps(rows))
    with pytest.warns(
        UserWarning,
        match="'bare' has no instruction, so the 'instructed' and 'instructed \\+ scaled mask' rows are left out",
    ):
        table = evaluate(llama, load_task(str(tmp_path / "bare.json")), HeadMask.full(llama), NO_TEXT).table
    assert "instructed" not in table.setting.tolist()
    for row in rows:
        row["instruction"] = "Reverse: {input}"
    (tmp_path / "told.json").write_text(json.dumps(rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an instructed task: nothing to say
        table = evaluate(llama, load_task(str(tmp_path / "told.json")), HeadMask.full(llama), NO_TEXT).table
    assert table.setting.tolist() == ["original", "instructed", "masked", "random mask", "instructed + scaled mask"]


# ---------------------------------------------------------------------- properties
texts = st.text(max_size=20)
text_lists = st.lists(texts, min_size=1, max_size=5)


@given(data=st.data(), predictions=text_lists)
def test_rouge_and_bleu_are_bounded_and_one_on_identical_texts(data, predictions):
    references = data.draw(st.lists(texts, min_size=len(predictions), max_size=len(predictions)))
    for char_level in (False, True):
        assert 0.0 <= rouge_l(predictions, references, char_level=char_level) <= 1.0
        assert 0.0 <= bleu(predictions, references, char_level=char_level) <= 100.0 + 1e-9
    assert 0.0 <= paper_rouge_l(predictions, references) <= 1.0
    if all(any(c.isalnum() for c in p) for p in predictions):
        assert rouge_l(predictions, predictions) == pytest.approx(1.0)


@given(data=st.data(), predictions=st.lists(texts, min_size=1, max_size=3))
def test_paper_bleu_is_bounded(data, predictions):
    references = data.draw(st.lists(texts, min_size=len(predictions), max_size=len(predictions)))
    scores = paper_bleu_scores(predictions, references)
    assert len(scores) == len(predictions) and all(0.0 <= s <= 1.0 + 1e-9 for s in scores)


@given(metric=st.sampled_from(PAIRED), text=texts, other=text_lists, first=st.booleans())
def test_a_string_is_always_refused(metric, text, other, first):
    with pytest.raises(TypeError):
        metric(text, other) if first else metric(other, text)


@given(metric=st.sampled_from(PAIRED), a=text_lists, b=text_lists)
def test_unequal_lengths_are_always_refused(metric, a, b):
    if len(a) == len(b):
        b = [*b, "extra"]
    with pytest.raises(ValueError, match="equally many"):
        metric(a, b)


@given(
    metric=st.sampled_from(PAIRED),
    a=text_lists,
    bad=st.none() | st.integers() | st.floats() | st.booleans() | st.lists(st.text(max_size=2), max_size=2),
    data=st.data(),
)
def test_a_non_text_item_is_a_type_error_naming_it(metric, a, bad, data):
    i = data.draw(st.integers(0, len(a) - 1))
    broken = [*a[:i], bad, *a[i + 1 :]]
    with pytest.raises(TypeError, match=rf"\[{i}\] must be a string|does not have the type it needs|Type-check error"):
        metric(broken, list(a))


@given(data=st.data(), n=st.integers(1, 8))
def test_score_outputs_on_generated_outputs(data, n):
    outputs = data.draw(st.lists(texts, min_size=n, max_size=n))
    inputs = data.draw(st.lists(texts, min_size=n, max_size=n))
    answers = data.draw(st.lists(st.text(min_size=1, max_size=8), min_size=n, max_size=n))
    row, per = score_outputs(TASK, outputs, inputs, answers)
    assert 0.0 <= row["strict"] <= row["accuracy"] or row["strict"] <= 1.0
    assert row["accuracy_low"] <= row["accuracy"] <= row["accuracy_high"]
    assert all(len(v) == n for v in per.values())
    with pytest.raises(ValueError, match="equally many"):
        score_outputs(TASK, [*outputs, "x"], inputs, answers)


@given(pairs=st.lists(st.tuples(st.booleans(), st.booleans()), max_size=30))
def test_mcnemar_is_a_symmetric_probability(pairs):
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    p = mcnemar_exact(a, b)
    assert 0.0 <= p <= 1.0 and p == mcnemar_exact(b, a)
    if a == b:
        assert p == 1.0


@given(n=st.integers(1, 500), data=st.data())
def test_wilson_bounds_hold_the_proportion(n, data):
    k = data.draw(st.integers(0, n))
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    with pytest.raises(ValueError):
        wilson_interval(n + 1, n)


@given(generations=st.lists(texts, min_size=1, max_size=4))
def test_target_language_share_is_a_share(generations):
    share = target_language_share(generations, "en")
    assert share * len(generations) == pytest.approx(round(share * len(generations)))
    assert 0.0 <= share <= 1.0
