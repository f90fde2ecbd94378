"""`rescore`: the score columns of a table recomputed from its stored outputs, no model run."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from headsup_lens import HeadMask, load_task
from headsup_lens._io import read_table, stored_table
from headsup_lens.data import Task
from headsup_lens.evaluation import EvalConfig, evaluate, rescore

from ..training.planted import planted_mask, planted_task
from .test_evaluate import planted  # noqa: F401  (module-scoped model fixture)

FIGURES = Path(__file__).resolve().parents[2] / "figures" / "smollm2"
TEXT = {"input": str, "answer": str, "output": str}
# The columns rescore keeps (they need the model); every other one is recomputed from the outputs.
KEPT = ("task", "mask_task", "setting", "instructed", "alpha", "n_kept", "n_examples", "answer_nll", "perplexity")


def _round_trip(frame: pd.DataFrame) -> pd.DataFrame:
    """What a CSV holds: `evaluate`'s outputs as they are stored."""
    return read_table(io.StringIO(frame.to_csv(index=False)))


def _stored_generations(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(frame.to_csv(index=False)), keep_default_na=False, dtype=TEXT)


def test_rescore_of_stored_outputs_equals_the_evaluation(planted):  # noqa: F811
    task = planted_task()
    result = evaluate(
        planted, task, HeadMask(planted_mask()), EvalConfig(text_metrics="on", progress=False), other_mask=None
    )
    table, texts = _round_trip(result.table), _stored_generations(result.generations)
    again = rescore(task, table, texts)
    pd.testing.assert_frame_equal(again.table, table, check_exact=True)
    pd.testing.assert_frame_equal(_round_trip(again.generations), _round_trip(result.generations), check_exact=True)
    assert {"rouge_l", "bleu", "p_vs_original"} <= set(again.table.columns)


def test_labelled_variants_are_paired_like_their_setting(planted):  # noqa: F811
    """A script's extra row "masked, seed 1" (another seed's mask in the masked role) gets its
    McNemar p-values against the reference rows, as "masked" does; a row listed before the
    references is still paired with them."""
    task = planted_task()
    result = evaluate(planted, task, HeadMask(planted_mask()), EvalConfig(progress=False))
    table, texts = _round_trip(result.table), _stored_generations(result.generations)
    variant = table[table.setting == "masked"].assign(setting="masked, seed 1")
    table = pd.concat([variant, table], ignore_index=True)
    texts = pd.concat([texts, texts[texts.setting == "masked"].assign(setting="masked, seed 1")], ignore_index=True)
    scored = rescore(task, table.assign(p_vs_original=float("nan")), texts).table.set_index("setting")
    for column in ("p_vs_original", "p_vs_instructed", "accuracy", "strict_low"):
        assert scored.loc["masked, seed 1", column] == scored.loc["masked", column], column
    assert pd.notna(scored.loc["masked, seed 1", "p_vs_original"])
    assert scored.loc[["original", "echo baseline"], "p_vs_original"].isna().all()


def test_rescore_refuses_what_it_cannot_score(planted):  # noqa: F811
    task = planted_task()
    result = evaluate(planted, task, HeadMask(planted_mask()), EvalConfig(progress=False))
    table, texts = _round_trip(result.table), _stored_generations(result.generations)
    with pytest.raises(ValueError, match="'masked' has no generations"):
        rescore(task, table, texts[texts.setting != "masked"])
    with pytest.raises(ValueError, match="settings that the table does not have: \\['masked'\\]"):
        rescore(task, table[table.setting != "masked"], texts)
    with pytest.raises(ValueError, match="not examples 0..19"):
        rescore(task, table, texts.drop(index=texts.index[3]))
    parsed = pd.read_csv(io.StringIO(result.generations.to_csv(index=False)))  # empty outputs become NaN
    parsed.loc[0, "output"] = float("nan")
    with pytest.raises(ValueError, match="keep_default_na=False"):
        rescore(task, table, parsed)


def test_outputs_of_another_task_are_refused_not_scored_against_its_labels(planted):  # noqa: F811
    task = planted_task()
    result = evaluate(planted, task, HeadMask(planted_mask()), EvalConfig(progress=False))
    table, texts = _round_trip(result.table), _stored_generations(result.generations)
    # Another task with the same inputs but other answers: its labels would score these outputs wrongly.
    relabelled = [(x, "Y") for x, _ in task.pairs]
    other = Task.from_pairs("other", relabelled, instruction=task.instruction, n_eval=len(task.eval_pairs))
    with pytest.raises(ValueError, match="the table holds outputs of task 'planted', not of task 'other'"):
        rescore(other, table, texts)
    with pytest.raises(ValueError, match="the generations holds outputs of task 'planted', not of task 'other'"):
        rescore(other, table.assign(task="other"), texts)
    same_name = Task.from_pairs("planted", relabelled, instruction=task.instruction, n_eval=len(task.eval_pairs))
    with pytest.raises(ValueError, match="generations example 0 .* is not a pair of task 'planted'"):
        rescore(same_name, table, texts)


STORED = sorted(FIGURES.glob("tables12_evaluation_*.csv"))


@pytest.mark.parametrize("path", STORED, ids=[p.stem.removeprefix("tables12_evaluation_") for p in STORED])
def test_rescore_reproduces_the_committed_smollm2_tables(path, shared_data_dir):
    """Before/after for evaluation on SmolLM2: the committed tables and generations were written by
    the evaluation before it was split into pieces; scoring their outputs again with today's pieces
    gives every score column (the losses need the model and are not recomputed): counts, labels and
    texts exactly, floats to a relative 1e-9."""
    table = pd.read_csv(path)
    # A long table of outputs is committed gzipped (stored_table finds it).
    generations = stored_table(path.with_name(path.name.replace("evaluation", "generations")))
    texts = pd.read_csv(generations, keep_default_na=False, dtype=TEXT)
    task = load_task(table.task.iloc[0], shared_data_dir)
    scores = [c for c in table.columns if c not in KEPT]
    blank = table.assign(**dict.fromkeys(scores, float("nan")))  # nothing to copy: every score is recomputed
    again = rescore(task, blank, texts)
    _assert_scores_equal(again.table, table)
    # The combined table the README and the results pages read holds the same rows.
    combined = pd.read_csv(path.with_name("tables12_evaluation.csv"))
    rows = combined[combined.task == table.task.iloc[0]].reset_index(drop=True)[list(table.columns)]
    _assert_scores_equal(again.table, rows.astype(table.dtypes.to_dict()))
    stored = pd.read_csv(generations, keep_default_na=False)
    now = _round_trip_texts(again.generations)
    assert sorted(now.columns) == sorted(stored.columns)  # the same columns; their order is the writer's
    pd.testing.assert_frame_equal(now, stored[list(now.columns)], check_exact=True)
    assert {"accuracy", "strict", "p_vs_original"} <= set(scores) and len(table) >= 8


def _assert_scores_equal(now: pd.DataFrame, stored: pd.DataFrame) -> None:
    """Counts, labels and texts exactly; float columns (accuracies, Wilson bounds, p-values) to a relative
    1e-9: scipy's binomial test may round its last bits differently on another CPU or release."""
    floats = [c for c in stored.columns if pd.api.types.is_float_dtype(stored[c])]
    exact = [c for c in stored.columns if c not in floats]
    pd.testing.assert_frame_equal(now[exact], stored[exact], check_exact=True)
    pd.testing.assert_frame_equal(now[floats], stored[floats], check_exact=False, rtol=1e-9, atol=0.0)


def _round_trip_texts(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(frame.to_csv(index=False)), keep_default_na=False)


def test_the_committed_smollm2_tables_are_there():
    assert len(STORED) == 7, "figures/smollm2 lost its settings tables"
