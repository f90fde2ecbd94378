"""The second reading of outputs on hand-made cases: strict matcher, echo and empty outputs, label
tasks, Wilson intervals and the exact paired test; and the columns `evaluate` adds."""

from __future__ import annotations

import json
import math

import pytest

from headsup_lens import HeadMask
from headsup_lens.data import Task
from headsup_lens.evaluation import (
    EvalConfig,
    balanced_accuracy,
    evaluate,
    is_echo,
    is_empty,
    is_strict,
    mcnemar_exact,
    normalize,
    score_outputs,
    task_labels,
    wilson_interval,
)
from headsup_lens.evaluation._scoring import majority_label

from ..training.planted import planted_mask, planted_task
from .test_evaluate import planted  # noqa: F401  (module-scoped model fixture)


def test_strict_matcher_needs_the_whole_answer_and_nothing_else():
    paper = Task.from_pairs("t", [("virtue", "vice"), ("Tunisia", "Tunis")], matcher="contains")
    assert paper.is_correct("device", "vice") and paper.is_correct("Tunisia", "Tunis")  # the paper's matcher
    assert not is_strict("device", "vice") and not is_strict("Tunisia", "Tunis")
    assert not is_strict("vice versa", "vice") and not is_strict("The capital is Tunis.", "Tunis")
    assert is_strict("vice.", "vice") and is_strict("  Tunis\n\nTunisia is a country", "Tunis")
    assert not is_strict("vice", "Vice") and not is_strict("farm", "FARM")  # case is the answer of some tasks
    assert is_strict("Washington, D.C.", "Washington DC") is False  # "d c" is two words, "dc" one
    assert is_strict("Washington, D.C.", "Washington, D.C.")
    assert not is_strict("", "") and not is_strict("...", "vice")
    assert normalize("  Élan,  VITAL!\t") == "Élan VITAL" and normalize("Élan VITAL", casefold=True) == "élan vital"


def test_echo_detection():
    assert is_echo("Tunisia", "Tunisia") and is_echo("Tunisia!\nTunisia", "Tunisia")
    assert not is_echo("FARM", "farm")  # the uppercase task's answer is no echo
    assert is_echo('The antonym of "disconnected" is', "disconnected")  # truncated echo
    assert not is_echo("Tunis", "Tunisia") and not is_echo("connected", "disconnected")  # whole words only
    long_input = "one of the most charming and quirky films of the year , and original"
    assert is_echo("one of the most charming and", long_input)  # five input words in a row: cut copy
    assert is_echo("charming and quirky films of the", long_input)  # any run of the input
    assert not is_echo("charming and quirky", long_input)  # fewer than five words, not the whole input
    assert not is_echo("positive", long_input)
    assert is_empty("") and is_empty(" \n\n") and is_empty("...!") and not is_empty("\n0")


def wilson_reference(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(7, 10), (0, 20), (20, 20), (26, 100), (3, 98)])
def test_wilson_interval_by_hand(k, n):
    assert wilson_interval(k, n) == pytest.approx(wilson_reference(k, n), abs=1e-9)
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_wilson_interval_known_value():
    assert wilson_interval(7, 10) == pytest.approx((0.39678, 0.89221), abs=1e-5)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_mcnemar_exact_is_the_binomial_test_of_discordant_pairs():
    a = [True] * 5 + [False] * 10 + [True] * 3
    b = [False] * 5 + [False] * 10 + [True] * 3
    assert mcnemar_exact(a, b) == pytest.approx(2 * 0.5**5)  # 5 discordant, all one way
    c = [True, False, True, False, True, True]
    d = [False, True, False, True, False, True]
    # 3 against 2 discordant pairs: the two-sided exact p-value by brute force over all 2^5 splits
    tail = sum(math.comb(5, j) for j in range(6) if min(j, 5 - j) <= 2) / 2**5
    assert mcnemar_exact(c, d) == pytest.approx(tail) == 1.0
    assert mcnemar_exact([True, False], [True, False]) == 1.0
    with pytest.raises(ValueError, match="equally many"):
        mcnemar_exact([True], [])


def test_label_tasks_are_detected_from_the_answers():
    sentiment = Task.from_pairs("s", [(f"text {i}", "positive" if i % 3 else "negative") for i in range(30)])
    labels = task_labels(sentiment)
    assert labels.kind == "answer" and labels.values == ("negative", "positive")
    assert labels.predicted("Positive.\nnegative", "x") == "positive"
    assert labels.predicted("It is not negative, it is positive", "x") == "negative"  # the first label named
    assert labels.predicted("Theft", "x") == "(none)"
    choice = Task.from_pairs(
        "c",
        [
            ("cat, chair, table", "cat"),
            ("lamp, dog, sofa", "dog"),
            ("bed, cup, horse", "horse"),
            ("mouse, pen, box", "mouse"),
        ],
    )
    labels = task_labels(choice)
    assert labels.kind == "choice" and labels.values == ("1", "2", "3")
    assert labels.gold("lamp, dog, sofa", "dog") == "2"
    assert labels.predicted("The dog", "lamp, dog, sofa") == "2"
    assert majority_label(choice, labels, "all") == "1"
    assert (
        task_labels(
            Task.from_pairs("w", [(w, w[::-1]) for w in ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op", "qr"]])
        )
        is None
    )
    assert balanced_accuracy(["a", "a", "a", "b"], ["a", "a", "b", "a"]) == pytest.approx((2 / 3 + 0) / 2)


def test_score_outputs_on_hand_made_outputs():
    task = Task.from_pairs(
        "antonym", [("virtue", "vice"), ("unaware", "aware"), ("hot", "cold"), ("up", "down")], n_eval=4
    )
    inputs = ["virtue", "unaware", "hot", "up"]
    answers = ["vice", "aware", "cold", "down"]
    outputs = ["device", "unaware", "cold.", "\n\n"]
    row, per = score_outputs(task, outputs, inputs, answers)
    # whole words: "device" is no "vice", and "unaware" (the input echoed) no "aware"; the substring
    # reading of the reference code credits both
    assert per["correct"] == [False, False, True, False]
    assert per["substring"] == [True, True, True, False]
    assert per["strict"] == [False, False, True, False]
    assert per["echo"] == [False, True, False, False] and per["empty"] == [False, False, False, True]
    assert (
        row["accuracy"] == 0.25
        and row["substring_accuracy"] == 0.75
        and row["strict"] == 0.25
        and row["echo"] == 1
        and row["empty"] == 1
    )
    assert (row["strict_low"], row["strict_high"]) == pytest.approx(wilson_reference(1, 4))
    assert "balanced_accuracy" not in row


def test_evaluate_adds_controls_intervals_and_paired_tests(planted):  # noqa: F811
    task = planted_task()
    result = evaluate(planted, task, HeadMask(planted_mask()))
    table, texts = result.table, result.generations
    row = table.set_index("setting")
    assert table.setting.tolist()[-2:] == ["echo baseline", "majority label"]  # one answer ("X"): a label task
    assert row.loc["masked", "accuracy"] == 1.0 and row.loc["original", "accuracy"] == 0.0
    assert row.loc["masked", "p_vs_original"] == pytest.approx(2 * 0.5**20)  # 20 discordant pairs, one way
    assert math.isnan(row.loc["original", "p_vs_original"])
    assert (row.loc["masked", "accuracy_low"], row.loc["masked", "accuracy_high"]) == pytest.approx(
        wilson_reference(20, 20)
    )
    assert row.loc["echo baseline", "echo"] == 20 and row.loc["echo baseline", "accuracy"] == 0.0
    assert row.loc["majority label", "accuracy"] == 1.0 and json.loads(
        row.loc["majority label", "predicted_labels"]
    ) == {"X": 20}
    # every number is backed by the generations
    assert len(texts) == 20 * len(table) and set(texts.setting) == set(table.setting)
    for setting, group in texts.groupby("setting"):
        assert group.correct.mean() == pytest.approx(row.loc[setting, "accuracy"])
        assert group.strict.mean() == pytest.approx(row.loc[setting, "strict"])
        assert group.echo.sum() == row.loc[setting, "echo"]
        assert [task.is_correct(o, a) for o, a in zip(group.output, group.answer)] == group.correct.tolist()
    assert texts[texts.setting == "echo baseline"].output.tolist() == [x for x, _ in task.eval_pairs]


def test_generate_false_has_no_controls(planted):  # noqa: F811
    table = evaluate(planted, planted_task(), HeadMask(planted_mask()), EvalConfig(generate=False)).table
    assert "echo baseline" not in set(table.setting) and "strict" not in table
