"""Answer loss, batched generation with per-row masks, metrics and the settings table."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from headsup_lens import HeadMask, fingerprint, load_model
from headsup_lens.data import IGNORE_INDEX, Task, tokenize_pairs
from headsup_lens.evaluation import EvalConfig, accuracy, answer_loss, bleu, evaluate, generations, rouge_l
from headsup_lens.evaluation._evaluate import _run_setting as REAL_RUN_SETTING
from headsup_lens.evaluation._table import GENERATION_COLUMNS
from headsup_lens.gates import value_gate

from ..conftest import random_mask
from ..training.planted import build_planted_dir, planted_mask, planted_task
from ..validation.refusal import assert_refused

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
        answer_loss(llama, Task.from_pairs("one", [pair], n_eval=1), mask=masks[i])
        for i, pair in enumerate(task.eval_pairs)
    ]
    assert batched == pytest.approx(sum(alone) / len(alone), rel=1e-5)
    with pytest.raises(ValueError, match="per-row mask has 3 rows for 6 examples"):
        answer_loss(llama, task, mask=masks[:3])


def test_loss_passes_grouped_by_length_keep_each_example_and_its_mask(llama, monkeypatch):
    """Rows run in length-sorted passes (here forced to several, as on a real model on a CPU): each
    example keeps its own per-row mask and its own loss."""
    import headsup_lens.evaluation._answers as answers_module
    from headsup_lens.data import encode_split, length_groups
    from headsup_lens.evaluation import answer_nll_per_example

    encoded = encode_split(llama, word_task())
    masks = random_mask(llama, seed=4, rows=6)
    one_pass = answer_nll_per_example(llama, encoded, mask=masks, batch_size=16)
    passes = []

    def grouped(model, rows, max_rows=None):
        groups = length_groups([len(p) + len(a) for p, a in rows], overhead=2.0, max_rows=max_rows)
        passes.append([sorted(g) for g in groups])
        return groups

    monkeypatch.setattr(answers_module, "length_batches", grouped)
    sums, counts = answer_nll_per_example(llama, encoded, mask=masks, batch_size=16)
    assert len(passes[0]) > 1 and passes[0] != [list(range(6))]
    torch.testing.assert_close(sums, one_pass[0], rtol=1e-5, atol=1e-6)
    assert torch.equal(counts, one_pass[1])


def test_answers_scored_with_their_generations_equal_the_loss_passes(any_model):
    """`answers_and_nll` (what `evaluate` runs) gives `generate_answers`' texts and
    `answer_nll_per_example`'s sums and counts, per-row masks included; a row whose joint
    tokenisation gave it another prompt than generation continues (forced here on two rows) is
    scored after its own prompt."""
    from dataclasses import replace

    from headsup_lens.data import encode_split
    from headsup_lens.evaluation._answers import answer_nll_per_example, answers_and_nll, generate_answers

    encoded = encode_split(any_model, word_task())
    rows = list(encoded.rows)
    for i in (1, 4):  # the row's prompt one token shorter, that token moved into its answer
        prompt, answer = rows[i]
        rows[i] = (prompt[:-1], [prompt[-1], *answer])
    encoded = replace(encoded, rows=tuple(rows))
    masks = random_mask(any_model, seed=6, rows=6)
    options = dict(mask=masks, alpha=0.0, gate="value", max_new_tokens=5, batch_size=4)
    texts, sums, counts = answers_and_nll(any_model, encoded, **options)
    expected_sums, expected_counts = answer_nll_per_example(any_model, encoded, mask=masks, batch_size=4)
    assert texts == generate_answers(any_model, encoded.prompts, **options)
    torch.testing.assert_close(sums, expected_sums, rtol=1e-4, atol=1e-4)
    assert torch.equal(counts, expected_counts)


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
    table = evaluate(planted, task, mask, other_mask=HeadMask.full(planted)).table
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
    sentences = evaluate(planted, task, mask, EvalConfig(text_metrics="on")).table
    assert {"rouge_l", "bleu"} <= set(sentences.columns)
    assert row.loc["masked", "accuracy"] == 1.0 and row.loc["original", "accuracy"] == 0.0
    assert row.loc["random mask", "n_kept"] == row.loc["masked", "n_kept"] == 28
    assert row.loc["other model's mask", "answer_nll"] == pytest.approx(row.loc["original", "answer_nll"])
    with pytest.raises(ValueError, match="does not fit model"):
        evaluate(planted, task, mask, other_mask=HeadMask.full(llama))


def test_uninstructed_task_skips_instructed_settings(planted):
    task = Task.from_pairs("bare", planted_task().pairs, n_eval=5)
    with pytest.warns(UserWarning, match="'bare' has no instruction"):
        result = evaluate(planted, task, HeadMask(planted_mask()), EvalConfig(generate=False))
    assert result.table.setting.tolist() == ["original", "masked", "random mask"] and "accuracy" not in result.table
    assert result.generations.empty and list(result.generations.columns) == list(GENERATION_COLUMNS)


def test_query_gate_table_has_no_scaled_setting(planted):
    config = EvalConfig(gate="query", generate=False)
    table = evaluate(planted, planted_task(), HeadMask(planted_mask()), config).table
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


def test_a_plain_tensor_mask_is_accepted_like_everywhere_else(planted):
    import headsup_lens as hl

    quick = EvalConfig(generate=False)
    from_tensor = hl.evaluate(planted, planted_task(), planted_mask(), quick).table
    from_mask = evaluate(planted, planted_task(), HeadMask(planted_mask()), quick).table
    assert from_tensor.equals(from_mask)
    with pytest.raises(TypeError, match="mask"):
        evaluate(planted, planted_task(), [[1.0]], quick)


def test_chosen_settings_equal_those_rows_of_the_full_table(planted):
    task, mask = planted_task(), HeadMask(planted_mask())
    full = evaluate(planted, task, mask).table.set_index("setting")
    some = evaluate(planted, task, mask, EvalConfig(settings=("masked", "random mask"))).table.set_index("setting")
    assert some.index.tolist() == ["masked", "random mask"]
    for setting in some.index:
        for column in ("answer_nll", "accuracy", "strict", "echo", "n_kept"):
            assert some.loc[setting, column] == pytest.approx(full.loc[setting, column]), (setting, column)
    assert some.p_vs_original.isna().all()  # no reference row in this call to pair with
    with pytest.raises(ValueError, match="other model's mask.? needs other_mask"):
        evaluate(planted, task, mask, EvalConfig(settings=("masked", "other model's mask")))
    with pytest.raises(ValueError, match="unknown \\['maskd'\\]"):
        evaluate(planted, task, mask, EvalConfig(settings=("maskd",)))


def test_prompts_are_rendered_and_tokenised_once_per_prompt_kind(planted, monkeypatch):
    """Every setting reads the same encoded prompts: one `encode_split` per prompt kind (bare and
    instructed), one rendering per example and kind, whatever the number of settings."""
    from headsup_lens.evaluation import _evaluate as evaluate_module
    from headsup_lens.models import PromptFormat

    task, encodings, renders = planted_task(), [], []
    real_encode, real_render = evaluate_module.encode_split, PromptFormat.render
    monkeypatch.setattr(evaluate_module, "encode_split", lambda *a, **k: encodings.append(a[3]) or real_encode(*a, **k))
    monkeypatch.setattr(
        PromptFormat, "render", lambda self, *a, **k: renders.append(a[0]) or real_render(self, *a, **k)
    )
    result = evaluate(planted, task, HeadMask(planted_mask()), other_mask=HeadMask.full(planted))
    assert len(result.table) >= 7  # six model settings and the controls
    assert sorted(encodings) == [False, True]
    assert len(renders) == 2 * len(task.eval_pairs)


def test_controls_and_needs_come_from_the_registry(planted):
    from headsup_lens.evaluation import SETTINGS

    bare = Task.from_pairs("bare", planted_task().pairs, n_eval=5)
    table = evaluate(planted, bare, None, EvalConfig(settings=("original", "echo baseline"))).table
    assert table.setting.tolist() == ["original", "echo baseline"]
    assert table.set_index("setting").loc["echo baseline", "echo"] == 5  # each output is the input
    with pytest.raises(ValueError, match="'masked' needs a mask"):
        evaluate(planted, bare, None, EvalConfig(settings=("masked",)))
    with pytest.raises(ValueError, match="'instructed' needs an instruction"):
        evaluate(planted, bare, None, EvalConfig(settings=("instructed",)))
    with pytest.raises(ValueError, match="'echo baseline' needs generate=True"):
        evaluate(planted, bare, None, EvalConfig(settings=("echo baseline",), generate=False))
    assert SETTINGS["instructed + scaled mask"].needs == ("instruction", "value gate", "mask")


def test_progress_bar_per_setting_and_quiet_without(planted, capsys):
    task, mask = planted_task(), HeadMask(planted_mask())
    evaluate(planted, task, mask, EvalConfig(generate=False, settings=("original", "masked")))
    err = capsys.readouterr().err
    assert f"{task.name}: original" in err and f"{task.name}: masked" in err and "ex/s" in err
    evaluate(planted, task, mask, EvalConfig(generate=False, settings=("original", "masked"), progress=False))
    assert capsys.readouterr().err == ""


class Stop(Exception):
    """An interruption (as Ctrl-C would be) at a chosen setting."""


def _interrupt_after(monkeypatch, n: int) -> list[str]:
    """Make `evaluate` stop when its (n+1)-th setting starts; the names run."""
    from headsup_lens.evaluation import _evaluate as evaluate_module

    ran = []

    def counted(model, task, config, plan, setting, encoded):
        if len(ran) == n:
            raise Stop
        ran.append(setting.name)
        return REAL_RUN_SETTING(model, task, config, plan, setting, encoded)

    monkeypatch.setattr(evaluate_module, "_run_setting", counted)
    return ran


@pytest.mark.filterwarnings("error::DeprecationWarning")  # pandas 3 deprecates float_precision
def test_an_interrupted_evaluation_resumes_and_writes_one_complete_set(planted, tmp_path, monkeypatch, capsys):
    task, mask = planted_task(), HeadMask(planted_mask())
    config = EvalConfig(progress=False)
    fresh = evaluate(planted, task, mask, config, out_dir=tmp_path / "fresh")
    out = tmp_path / "out"
    ran = _interrupt_after(monkeypatch, 2)
    with pytest.raises(Stop):
        evaluate(planted, task, mask, config, out_dir=out)
    assert ran == ["original", "instructed"] and not (out / "results.csv").exists()
    partial = pd.read_csv(out / "results.partial.csv")
    assert partial.setting.tolist() == ["original", "instructed"]
    assert set(pd.read_csv(out / "generations.partial.csv").setting) == {"original", "instructed"}

    ran = _interrupt_after(monkeypatch, 100)
    capsys.readouterr()
    resumed = evaluate(planted, task, mask, config, out_dir=out)
    assert ran == ["masked", "random mask", "instructed + scaled mask"]  # the finished two are not rerun
    note = capsys.readouterr().err
    assert "resuming: 2 of 5 settings finished by an earlier run" in note and "(original, instructed)" in note
    pd.testing.assert_frame_equal(resumed.table, fresh.table, check_exact=True)
    pd.testing.assert_frame_equal(resumed.generations, fresh.generations, check_exact=True)
    for name in ("results.csv", "generations.csv"):
        assert (out / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name
    assert not list(out.glob("*.partial.*"))
    record = json.loads((out / "evaluation.json").read_text())
    assert record["model"]["content_hash"] == fingerprint(planted).content_hash
    assert record["settings"] == fresh.table.setting.tolist()


def test_partial_results_of_another_evaluation_are_refused(planted, llama, tmp_path, monkeypatch):
    task, mask = planted_task(), HeadMask(planted_mask())
    out = tmp_path / "out"
    _interrupt_after(monkeypatch, 1)
    with pytest.raises(Stop):
        evaluate(planted, task, mask, EvalConfig(alpha=0.5, progress=False), out_dir=out)
    before = (out / "results.partial.csv").read_bytes()
    _interrupt_after(monkeypatch, 100)
    with pytest.raises(ValueError, match=r"differs in alpha \(0.5 there, 0.25 here\)"):
        evaluate(planted, task, mask, EvalConfig(progress=False), out_dir=out)
    other_task = Task.from_pairs("other", planted_task().pairs, instruction="{input}", n_eval=6)
    with pytest.raises(ValueError, match="differs in task \\('planted'|task data"):
        evaluate(planted, other_task, mask, EvalConfig(alpha=0.5, progress=False), out_dir=out)
    bare = EvalConfig(alpha=0.5, progress=False, settings=("original",))
    with pytest.raises(ValueError, match="differs in model .*there.*here"):
        evaluate(llama, task, None, bare, out_dir=out)
    assert (out / "results.partial.csv").read_bytes() == before  # nothing was lost
    assert not (out / "results.csv").exists()


def test_an_empty_out_dir_is_refused_not_taken_as_the_current_folder(planted, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = EvalConfig(settings=("original",), progress=False)
    assert_refused(lambda: evaluate(planted, planted_task(), None, config, out_dir=""), ValueError, "out_dir is empty")
    assert list(tmp_path.iterdir()) == []
