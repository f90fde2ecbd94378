"""The staged experiments over stored masks (`experiments/smollm2.py`'s steps) on a tiny random model:
select, train, analyze in separate runs, the combined tables over every analysed task, the rows of a
seed mask stored later, and the Markdown summaries."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from headsup_lens import EvalConfig, evaluate, load_model
from headsup_lens.data import load_task
from headsup_lens.masks import HeadMask
from headsup_lens.models import stop_token_ids
from headsup_lens.reproduce import ExperimentOptions, open_experiment
from headsup_lens.reproduce._staged import (
    add_seed_rows,
    analyze_task,
    combine_tables,
    fewshot_table,
    seed0_tasks,
    seed_masks,
    select_tasks,
    selection_markdown,
    selection_table,
    settings_table,
    summary_markdown,
    train_stored_masks,
)

from ..conftest import build_llama_dir

TASKS = ["organism/antonym", "organism/reverse"]


def stage(model_dir: Path, tmp: Path, **changes):
    options = ExperimentOptions(model=str(model_dir), out=str(tmp), png=False, steps=3, batch_size=2, schedule="fast")
    return open_experiment("smollm2", replace(options, **changes), tmp)


def evaluate_and_analyze(model_dir: Path, tmp: Path, name: str, step: str = "analyze") -> None:
    with stage(model_dir, tmp) as xp:
        task = load_task(name)
        mask = HeadMask.load(xp.current(f"masks/{name.replace('/', '__')}.safetensors"), xp.model)
        settings_table(xp, task, mask, seed_masks(xp), alpha=0.25, batch_size=8, stage=step)
        if step == "analyze":
            analyze_task(xp, task, mask, new_tokens=2, batch_size=8, title="tiny")
        combine_tables(xp, title="tiny")


def test_select_train_analyze_from_stored_masks(tmp_path):
    model_dir = build_llama_dir(tmp_path / "model")
    out = tmp_path / "figures"  # files go to <out>/<model slug>: figures/model
    with stage(model_dir, out) as xp:
        select_tasks(xp, TASKS, batch_size=8)
    folder = out / "model"
    selection = pd.read_csv(folder / "task_selection.csv")
    assert sorted(selection.task) == sorted(TASKS)
    assert {"instructed", "uninstructed", "n_examples"} <= set(selection.columns)
    assert (folder / "task_selection.md").read_text().count("\n") == 2 + len(TASKS)
    assert len(pd.read_csv(folder / "task_selection_long.csv")) == 2 * len(TASKS)

    with stage(model_dir, out) as xp:
        train_stored_masks(xp, [load_task(n) for n in TASKS], xp.train_config(), tmp_path / "runs")
    with stage(model_dir, out, seed=1) as xp:
        train_stored_masks(xp, [load_task(TASKS[0])], xp.train_config(), tmp_path / "runs")
    stored = sorted(p.name for p in (folder / "masks").glob("*.safetensors"))
    assert stored == [
        "organism__antonym.safetensors",
        "organism__antonym_seed1.safetensors",
        "organism__reverse.safetensors",
    ]
    assert not list(folder.glob("masks/**/checkpoints"))  # run folders with checkpoints stay under runs/

    # One task per run (as separate processes would), then the combined tables cover both.
    evaluate_and_analyze(model_dir, out, TASKS[0])
    assert set(pd.read_csv(folder / "tables12_evaluation.csv").task) == {TASKS[0]}
    evaluate_and_analyze(model_dir, out, TASKS[1])
    table = pd.read_csv(folder / "tables12_evaluation.csv")
    assert list(table.task.unique()) == TASKS
    assert pd.read_csv(folder / "tables12_evaluation_organism__reverse.csv").task.unique().tolist() == [TASKS[1]]
    assert {
        "original",
        "instructed",
        "masked",
        "random mask",
        "instructed + scaled mask",
        "masked, seed 1",
        "random mask, seed 1",
    } <= set(table.setting)
    assert "other model's mask" not in set(table.setting) and (table.n_examples > 0).all()
    assert sorted(pd.read_csv(folder / "fig2_summary.csv").order.unique()) == ["random", "weight"]
    assert len(pd.read_csv(folder / "table5_jaccard.csv")) == 3  # three stored masks: three pairs
    assert sorted(pd.read_csv(folder / "fig6_alpha_grid.csv").alpha.unique().round(1)) == [i / 10 for i in range(11)]
    for stem in (
        "fig2_removal_ranks_weight_organism__antonym",
        "fig4_similarity_organism__reverse",
        "table41_logit_lens_organism__antonym",
        "fig6_alpha_grid_organism__reverse",
        "table5_jaccard",
        "masks",
    ):
        assert (folder / f"{stem}.html").is_file(), stem
    assert set(pd.read_csv(folder / "times.csv").stage) == {"analyze", "train"}
    assert (folder / "tables12_summary.md").read_text() == summary_markdown(table)

    # A second seed trained after the table exists: only its rows are added, reference rows untouched,
    # and the added rows equal what a full evaluation of that seed's mask gives.
    before = pd.read_csv(folder / "tables12_evaluation_organism__reverse.csv")
    with stage(model_dir, out, seed=1) as xp:
        train_stored_masks(xp, [load_task(TASKS[1])], xp.train_config(), tmp_path / "runs")
    with stage(model_dir, out) as xp:
        assert add_seed_rows(xp, load_task(TASKS[1]), seed_masks(xp), alpha=0.25, batch_size=8)
        assert not add_seed_rows(xp, load_task(TASKS[1]), seed_masks(xp), alpha=0.25, batch_size=8)  # staged: seen
    after = pd.read_csv(folder / "tables12_evaluation_organism__reverse.csv")
    assert list(after.setting) == [
        *before.setting[:-1],
        "masked, seed 1",
        "random mask, seed 1",
        before.setting.iloc[-1],
    ]
    pd.testing.assert_frame_equal(after[after.setting.isin(before.setting)].reset_index(drop=True), before)
    model = load_model(str(model_dir))
    full = evaluate(
        model,
        load_task(TASKS[1]),
        HeadMask.load(folder / "masks" / "organism__reverse_seed1.safetensors", model),
        EvalConfig(batch_size=8, random_seed=0),
    ).table
    for setting in ("masked", "random mask"):
        mine, ref = after[after.setting == f"{setting}, seed 1"].iloc[0], full[full.setting == setting].iloc[0]
        for column in ("accuracy", "strict", "answer_nll", "echo", "p_vs_original", "p_vs_instructed"):
            assert mine[column] == pytest.approx(ref[column], rel=1e-5, nan_ok=True), (setting, column)
    texts = pd.read_csv(folder / "tables12_generations_organism__reverse.csv", keep_default_na=False)
    assert (texts.setting == "masked, seed 1").sum() == int(after[after.setting == "masked, seed 1"].n_examples.iloc[0])

    # Masks that other scripts keep beside the seed-0 ones (`_negative`, `_query`, `_mlp`: same task in their
    # metadata) are not seed-0 masks: the combined table still has each task once.
    shutil.copy(
        folder / "masks" / "organism__antonym.safetensors", folder / "masks" / "organism__antonym_negative.safetensors"
    )
    with stage(model_dir, out) as xp:
        assert seed0_tasks(xp) == TASKS
        table = combine_tables(xp, title="tiny")
    assert list(table.task.unique()) == TASKS and not table.duplicated(["task", "setting"]).any()
    assert not (folder / "fewshot_evaluation.csv").exists()  # no task has few-shot rows yet

    # Few-shot rows of one task: the combined few-shot table holds them, and only them.
    with stage(model_dir, out) as xp:
        mask = HeadMask.load(xp.current("masks/organism__antonym.safetensors"), xp.model)
        fewshot_table(xp, load_task(TASKS[0]), mask, shots=2, alpha=0.25, batch_size=8)
        combine_tables(xp, title="tiny")
    pd.testing.assert_frame_equal(
        pd.read_csv(folder / "fewshot_evaluation.csv"), pd.read_csv(folder / "fewshot_evaluation_organism__antonym.csv")
    )


def test_selection_table_and_markdown_of_a_scan():
    long = pd.DataFrame(
        {
            "task": ["a", "b", "a", "b", "c"],
            "instructed": [True, True, False, False, True],
            "accuracy": [0.5, 0.9, 0.1, 0.2, 0.7],
            "n_examples": [10, 20, 10, 20, 5],
            "seconds": [1.0, 2.0, 3.0, 4.0, 5.0],
        }
    )
    table = selection_table(pd.concat([long, long.iloc[:1]]))  # a repeated row counts once
    assert list(table.task) == ["b", "c", "a"]  # best instructed accuracy first
    assert table.set_index("task").scan_seconds.to_dict() == {"a": 4.0, "b": 6.0, "c": 5.0}
    assert selection_markdown(table).splitlines()[2:] == ["| b | 0.90 | 0.20 | 20 |", "| a | 0.50 | 0.10 | 10 |"]


FIGURES = Path(__file__).resolve().parents[2] / "figures" / "smollm2"


def test_the_committed_summaries_are_the_markdown_of_the_committed_tables():
    """The committed Markdown files are what the library writes from the committed tables."""
    table = pd.read_csv(FIGURES / "tables12_evaluation.csv")
    assert (FIGURES / "tables12_summary.md").read_text() == summary_markdown(table)
    selection = pd.read_csv(FIGURES / "task_selection.csv")
    assert (FIGURES / "task_selection.md").read_text() == selection_markdown(selection)


def test_fewshot_table_scores_the_stored_mask_on_k_shot_prompts(tmp_path):
    """The few-shot baseline (`smollm2.py fewshot`): the held-out inputs after k demonstrations; its
    "original" outputs are the greedy continuations of the k-shot prompts rendered by hand."""
    from headsup_lens import fingerprint
    from headsup_lens.data import encode_prompt, fewshot, task_prompts
    from headsup_lens.objective import greedy_generate

    from ..conftest import random_mask

    model_dir = build_llama_dir(tmp_path / "model")
    task = load_task(TASKS[0])
    with stage(model_dir, tmp_path / "figures") as xp:
        mask = HeadMask(random_mask(xp.model, seed=0), model=fingerprint(xp.model), metadata={"task": task.name})
        table = fewshot_table(xp, task, mask, shots=2, alpha=0.25, batch_size=8)
        model = xp.model
    folder = tmp_path / "figures" / "model"
    written = pd.read_csv(folder / "fewshot_evaluation_organism__antonym.csv")
    assert list(written.setting) == list(table.setting)
    assert {"original", "instructed", "masked", "random mask", "instructed + scaled mask"} <= set(table.setting)
    n_eval = len(task_prompts(task, "eval")[0])
    assert (table.loc[table.setting == "original", "n_examples"] == n_eval).all() and (table.shots == 2).all()
    assert set(pd.read_csv(folder / "times.csv").stage) == {"fewshot"}

    texts = pd.read_csv(folder / "fewshot_generations_organism__antonym.csv", keep_default_na=False)
    original = texts[texts.setting == "original"]
    users, shots, _ = task_prompts(fewshot(task, k=2), "eval")
    assert len(original) == n_eval and all(len(s) == 2 for s in shots)
    for i in range(3):
        ids = torch.tensor([encode_prompt(model, users[i], shots[i])])
        assert len(ids[0]) > len(encode_prompt(model, users[i]))  # the demonstrations are in the prompt
        tokens = greedy_generate(model, ids, max_new_tokens=task.max_new_tokens, stops=set(stop_token_ids(model)))
        assert original.output.iloc[i] == model.tokenizer.decode(tokens.tokens[0], skip_special_tokens=True)

    # A task with fewer than k + 100 training pairs (SmolLM2's country-capital has 97): nothing trains
    # here, so none are kept out as a dev set, and it is evaluated on the same held-out inputs.
    small = replace(task, pairs=task.pairs[-(task.n_eval + 4) :])
    with pytest.raises(ValueError, match="too few for k=2"):
        fewshot(small, k=2)
    with stage(model_dir, tmp_path / "small") as xp:
        table = fewshot_table(xp, small, mask, shots=2, alpha=0.25, batch_size=8)
    assert (table.loc[table.setting == "original", "n_examples"] == n_eval).all()
