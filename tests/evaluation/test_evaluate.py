"""Answer loss, batched generation with per-row masks, metrics and the settings table."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from headsup_lens import HeadMask, load_model
from headsup_lens.data import IGNORE_INDEX, Task, tokenize_pairs
from headsup_lens.evaluation import accuracy, answer_loss, bleu, evaluate, generations, rouge_l
from headsup_lens.gates import value_gate

from ..conftest import random_mask
from ..training.planted import build_planted_dir, planted_mask, planted_task

WORDS = ["abc", "hello there", "q", "longer input words", "xy", "Mixed Case", "z z", "tail"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return load_model(build_planted_dir(tmp_path_factory.mktemp("planted")), device="cpu", dtype="float32")


def word_task(n_eval: int = 6) -> Task:
    return Task.from_pairs("words", [(w, w[::-1]) for w in WORDS], instruction="Reverse: {input}", n_eval=n_eval)


def test_answer_loss_matches_a_plain_reference(any_model):
    task = word_task()
    mask = random_mask(any_model, seed=3)
    total, count, per_example = 0.0, 0, []
    for x, y in task.eval_pairs:  # one example at a time, full logits, PyTorch cross-entropy
        batch = tokenize_pairs(any_model, [(x, y)])
        with torch.no_grad(), value_gate(any_model, mask):
            logits = any_model(batch.input_ids)
        labels = batch.labels[0, 1:]
        example = F.cross_entropy(logits[0, :-1], labels, ignore_index=IGNORE_INDEX, reduction="sum").item()
        n = int((labels != IGNORE_INDEX).sum())
        total, count = total + example, count + n
        per_example.append(example / n)
    for batch_size in (1, 4, 16):
        # The paper's "PPL": each example's mean, then the mean over examples; "token" pools tokens.
        assert answer_loss(any_model, task, mask=mask, batch_size=batch_size) == pytest.approx(
            sum(per_example) / len(per_example), rel=1e-5
        )
        assert answer_loss(any_model, task, mask=mask, batch_size=batch_size, reduction="token") == pytest.approx(
            total / count, rel=1e-5
        )


def test_per_row_masks_in_the_loss(llama):
    task = word_task()
    masks = random_mask(llama, seed=1, rows=6)
    batched = answer_loss(llama, task, mask=masks, batch_size=4)
    alone = [
        answer_loss(llama, Task.from_pairs("one", [pair] * 2, n_eval=1), mask=masks[i])
        for i, pair in enumerate(task.eval_pairs)
    ]
    assert batched == pytest.approx(sum(alone) / len(alone), rel=1e-5)
    with pytest.raises(ValueError, match="per-row mask has 3 rows for 6 examples"):
        answer_loss(llama, task, mask=masks[:3])


def test_loss_passes_grouped_by_length_keep_each_example_and_its_mask(llama, monkeypatch):
    """Rows run in length-sorted passes (here forced to several, as on a real model on a CPU): each
    example keeps its own per-row mask and its own loss."""
    import headsup_lens.evaluation._evaluate as evaluate_module
    from headsup_lens.data import length_groups
    from headsup_lens.evaluation._evaluate import answer_nll_per_example

    task = word_task()
    masks = random_mask(llama, seed=4, rows=6)
    one_pass = answer_nll_per_example(llama, task, mask=masks, batch_size=16)
    passes = []

    def grouped(model, rows, max_rows=None):
        groups = length_groups([len(p) + len(a) for p, a in rows], overhead=2.0, max_rows=max_rows)
        passes.append([sorted(g) for g in groups])
        return groups

    monkeypatch.setattr(evaluate_module, "length_batches", grouped)
    sums, counts = answer_nll_per_example(llama, task, mask=masks, batch_size=16)
    assert len(passes[0]) > 1 and passes[0] != [list(range(6))]
    torch.testing.assert_close(sums, one_pass[0], rtol=1e-5, atol=1e-6)
    assert torch.equal(counts, one_pass[1])


@pytest.mark.parametrize("instructed", [False, True])
def test_batched_generation_equals_one_at_a_time(any_model, instructed):
    task = word_task()
    masks = random_mask(any_model, seed=2, rows=6)
    batched = generations(any_model, task, mask=masks, instructed=instructed, batch_size=4, max_new_tokens=6)
    for i, (x, _) in enumerate(task.eval_pairs):
        one = Task.from_pairs("one", [(x, "y")], instruction=task.instruction, n_eval=1)
        alone = generations(any_model, one, mask=masks[i], instructed=instructed, batch_size=1, max_new_tokens=6)
        assert batched[i] == alone[0]


def test_accuracy_and_table_on_the_planted_model(planted, llama):
    task = planted_task()
    mask = HeadMask(planted_mask(), model=None)
    assert accuracy(planted, task) == 0.0 and accuracy(planted, task, mask=mask) == 1.0
    table = evaluate(planted, task, mask, other_mask=HeadMask.full(planted))
    assert table.setting.tolist()[:6] == [
        "original",
        "instructed",
        "masked",
        "random mask",
        "other model's mask",
        "instructed + scaled mask",
    ]
    assert table.setting.tolist()[6] == "echo baseline"  # controls scored from fixed outputs follow the model's rows
    assert set(table.setting.tolist()[7:]) <= {"majority label"}
    assert {"answer_nll", "perplexity", "accuracy", "n_kept"} <= set(table.columns)
    assert "bleu" not in table and "rouge_l" not in table  # one-word answers: they would only restate accuracy
    row = table.set_index("setting")
    assert row.loc["masked", "answer_nll"] < 0.1 * row.loc["original", "answer_nll"]
    assert row.loc["masked", "answer_nll"] == pytest.approx(answer_loss(planted, task, mask=mask))
    assert row.loc["masked", "perplexity"] == pytest.approx(
        math.exp(answer_loss(planted, task, mask=mask, reduction="token"))
    )
    sentences = evaluate(planted, task, mask, generate=True, text_metrics=True)
    assert {"rouge_l", "bleu"} <= set(sentences.columns)
    assert row.loc["masked", "accuracy"] == 1.0 and row.loc["original", "accuracy"] == 0.0
    assert row.loc["random mask", "n_kept"] == row.loc["masked", "n_kept"] == 28
    assert row.loc["other model's mask", "answer_nll"] == pytest.approx(row.loc["original", "answer_nll"])
    with pytest.raises(ValueError, match="does not fit model"):
        evaluate(planted, task, mask, other_mask=HeadMask.full(llama))


def test_uninstructed_task_skips_instructed_settings(planted):
    task = Task.from_pairs("bare", planted_task().pairs, n_eval=5)
    table = evaluate(planted, task, HeadMask(planted_mask()), generate=False)
    assert table.setting.tolist() == ["original", "masked", "random mask"] and "accuracy" not in table


def test_query_gate_table_has_no_scaled_setting(planted):
    table = evaluate(planted, planted_task(), HeadMask(planted_mask()), gate="query", generate=False)
    assert table.setting.tolist() == ["original", "instructed", "masked", "random mask"]


def test_metrics_come_from_the_libraries():
    from rouge_score import rouge_scorer

    assert rouge_l(["我爱你"], ["我爱他"], char_level=True) == pytest.approx(2 / 3)
    assert rouge_l(["Привет мир"], ["привет мир"]) == 1.0  # non-ASCII words are not dropped
    english = rouge_scorer.RougeScorer(["rougeL"]).score("the cat sat", "the cat sat down")["rougeL"].fmeasure
    assert rouge_l(["the cat sat down"], ["the cat sat"]) == pytest.approx(english)
    assert bleu(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100.0)
    assert bleu(["完全不同"], ["我们谈得很好"], char_level=True) < 1.0
    with pytest.raises(ValueError, match="equally many"):
        rouge_l(["a"], [])


def test_finished_rows_are_handed_out_as_they_come(planted):
    seen = []
    table = evaluate(
        planted, planted_task(), HeadMask(planted_mask()), generate=False, on_row=lambda t: seen.append(len(t))
    )
    assert seen == list(range(1, len(table) + 1))


def test_a_plain_tensor_mask_is_accepted_like_everywhere_else(planted):
    import headsup_lens as hl

    from_tensor = hl.evaluate(planted, planted_task(), planted_mask(), generate=False)
    from_mask = evaluate(planted, planted_task(), HeadMask(planted_mask()), generate=False)
    assert from_tensor.drop(columns=[]).equals(from_mask)
    with pytest.raises(TypeError, match="mask"):
        evaluate(planted, planted_task(), [[1.0]], generate=False)


def test_chosen_settings_equal_those_rows_of_the_full_table(planted):
    task, mask = planted_task(), HeadMask(planted_mask())
    full = evaluate(planted, task, mask).set_index("setting")
    some = evaluate(planted, task, mask, settings=["masked", "random mask"]).set_index("setting")
    assert some.index.tolist() == ["masked", "random mask"]
    for setting in some.index:
        for column in ("answer_nll", "accuracy", "strict", "echo", "n_kept"):
            assert some.loc[setting, column] == pytest.approx(full.loc[setting, column]), (setting, column)
    assert some.p_vs_original.isna().all()  # no reference row in this call to pair with
    with pytest.raises(ValueError, match="other model's mask"):
        evaluate(planted, task, mask, settings=["masked", "other model's mask"])
