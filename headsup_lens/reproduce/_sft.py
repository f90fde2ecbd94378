"""The SFT activation-pattern paper's experiments (Zhao, Du et al.; `experiments/sft_patterns.py`):
each stage wires `headsup_lens.sft`'s measurements to the run's output files.

`sft_organism` fine-tunes the base organism on every task and composite, `sft_smollm2` LoRA-tunes the
loaded model (SmolLM2, or another real model with the same recipe) on function-vector tasks, `sft_selection` runs the pattern-guided data selection
(Tables 2/3) and `sft_grouping` tests Fig. 2's grouping from a stored correlation matrix. The tables
are written by `plots.save_table` (as the committed `figures/*/sft_*.csv` were); `sft_time` appends a
stage's wall time and settings to `sft_times.csv`. Run folders (checkpoints, patterns per step) go to
`runs`, outside the output folder: a rerun resumes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from ..analysis import example_patterns
from ..data import Task, load_task, tokenize_task
from ..masks import HeadMask
from ..models import load_model
from ..organism import TASK_NAMES, OrganismConfig, train_organism
from ..plots import change_correlation_figure, data_selection_figure, pattern_dynamics_figure, save_table
from ..sft import (
    FinetuneConfig,
    FinetuneResult,
    SelectionConfig,
    change_consistency,
    composition_fits,
    data_selection,
    finetune_,
    held_out_outputs,
    input_overlap,
    mask_overlap,
    pattern_subset,
    reloading,
    run_changes,
    run_tables,
    selection_summary,
    similarity_vs_loss,
    statistic_changes,
    task_grouping,
)
from ._experiment import Experiment, model_slug
from ._masks import stored_mask_path
from ._verdicts import ANALYSED_SEED, eliciting_seeds

# The organism's two composite tasks (a then b) whose pattern change is fitted from a's and b's.
COMPOSITES = (("plural", "uppercase"), ("reverse", "uppercase"))
# Three pairs of related function-vector tasks (lexical, factual recall, text classification), so
# that Fig. 2 can show whether pattern changes group related tasks.
SMOLLM2_TASKS = ("antonym", "synonym", "country-capital", "country-currency", "sentiment", "ag_news")
SMOLLM2_GROUPS = (("antonym", "synonym"), ("country-capital", "country-currency"), ("sentiment", "ag_news"))
ORGANISM_PATTERN_STEPS = (0, 10, 25, 50, 100)
SMOLLM2_PATTERN_STEPS = (0, 5, 10, 20, 50, 100, 200, 300)
# The base organism (`OrganismConfig.base`: no instructed rows) with a shorter schedule (CPU time).
BASE_ORGANISM = {"steps": 500, "batch_size": 32, "warmup_steps": 50, "checkpoint_every": 100}


def organism_sft_config(steps: int = 200, seed: int = 0) -> FinetuneConfig:
    """Instruction tuning of the base organism: all weights, batch 16, lr 1e-3, patterns on 32
    held-out words per task at `ORGANISM_PATTERN_STEPS` (those within the run) and the last step."""
    return FinetuneConfig(
        steps=steps,
        batch_size=16,
        lr=1e-3,
        seed=seed,
        pattern_steps=tuple(s for s in ORGANISM_PATTERN_STEPS if s <= steps),
        pattern_examples=32,
        checkpoint_every=50,
    )


def smollm2_sft_config(steps: int = 200, seed: int = 0) -> FinetuneConfig:
    """LoRA SFT of SmolLM2 on bare inputs (the setting of the Heads-up masks of the same tasks, and
    little accuracy before SFT): batch 8, patterns on 16 held-out examples at `SMOLLM2_PATTERN_STEPS`."""
    return FinetuneConfig.lora(
        steps=steps,
        batch_size=8,
        seed=seed,
        instructed=False,
        pattern_steps=tuple(s for s in SMOLLM2_PATTERN_STEPS if s <= steps),
        pattern_examples=16,
        checkpoint_every=25,
    )


def base_organism(folder: str | os.PathLike, *, threads: int | None = 1) -> Path:
    """The base organism's folder: trained there first (`OrganismConfig.base` with `BASE_ORGANISM`)
    when it holds no model yet."""
    folder = Path(folder)
    if not (folder / "model.safetensors").is_file():
        train_organism(OrganismConfig.base(**BASE_ORGANISM, threads=threads), folder, progress=True)
    return folder


def organism_selection(**overrides) -> SelectionConfig:
    """The organism: every basic task a candidate; targets four composites (their components are
    candidates: the oracle) and every basic task (the other seven are its candidates); full SFT."""
    return SelectionConfig(
        **{
            "model": "organism",
            "candidates": TASK_NAMES,
            "targets": (
                "plural+uppercase",
                "reverse+uppercase",
                "plural+reverse",
                "capitalize+reverse",
                *TASK_NAMES,
            ),
            "finetune": FinetuneConfig(batch_size=16, lr=1e-3),
            "steps": 40,
            "probe_steps": 30,
            "eval_examples": 100,
            "pattern_examples": 32,
            **overrides,
        }
    )


def smollm2_selection(**overrides) -> SelectionConfig:
    """SmolLM2: each target has candidates of the same kind (antonym: synonym; country-capital:
    country-currency, landmark-country; capitalize_first_letter: capitalize,
    lowercase_first_letter); LoRA SFT, 200 training pairs per task."""
    return SelectionConfig(
        **{
            "model": "smollm2",
            "candidates": (
                "synonym",
                "present-past",
                "singular-plural",
                "country-currency",
                "landmark-country",
                "capitalize",
                "lowercase_first_letter",
                "english-french",
            ),
            "targets": ("antonym", "country-capital", "capitalize_first_letter"),
            "finetune": FinetuneConfig.lora(batch_size=8),
            "steps": 50,
            "probe_steps": 20,
            "eval_examples": 50,
            "pattern_examples": 16,
            "train_pairs": 200,
            **overrides,
        }
    )


TIMES = "sft_times.csv"
INTERVALS = "sft_table1_intervals"


def _save(xp: Experiment, table: pd.DataFrame, stem: str, *, index: bool = False) -> None:
    save_table(table, xp.staged(f"{stem}.csv"), index=index)


def write_sft_run(xp: Experiment, result: FinetuneResult, config: FinetuneConfig, *, seed: int) -> None:
    """Table 1, accuracy, Fig. 2's change correlation and Fig. 5's dynamics of one fine-tuning run."""
    tables = run_tables(result, n_examples=config.pattern_examples, seed=seed)
    for key, stem in (("table1", "table1"), ("accuracy", "accuracy"), ("dynamics", "fig5_dynamics")):
        _save(xp, tables[key], f"sft_{stem}")
    _save(xp, tables["change_correlation"], "sft_fig2_change_correlation", index=True)
    xp.figure(change_correlation_figure(tables["change_correlation"]), "sft_fig2_change_correlation")
    tasks = list(tables["change_correlation"].index)
    xp.figure(pattern_dynamics_figure(tables["dynamics"], tasks), "sft_fig5_dynamics")


def sft_organism(xp: Experiment, *, base: str | Path, runs: str | Path, steps: int, seed: int) -> dict[str, Any]:
    """Instruction SFT of the base organism (`base_organism(base)`: trained there when missing) on every
    organism task and composite: the run's tables and the composition fits (Eq. 3). The recipe."""
    threads = torch.get_num_threads()
    model = load_model(str(base_organism(base, threads=threads)), dtype="float32")
    names = [f"organism/{n}" for n in TASK_NAMES] + [f"organism/{a}+{b}" for a, b in COMPOSITES]
    config = organism_sft_config(steps, seed)
    result = finetune_(model, [load_task(n) for n in names], config, out_dir=Path(runs) / f"organism_sft_seed{seed}")
    write_sft_run(xp, result, config, seed=seed)
    _save(xp, composition_fits(run_changes(result), COMPOSITES, prefix="organism/", seed=seed), "sft_composition")
    return {k: getattr(config, k) for k in ("steps", "batch_size", "lr", "method")}


def sft_grouping(xp: Experiment) -> pd.DataFrame | None:
    """Fig. 2's grouping test (do related tasks have the more similar changes) from the stored change
    correlation, as `sft_fig2_grouping.csv`: the related tasks, and again without the pairs that share
    their inputs (`input_overlap`, written as `sft_input_overlap.csv`); None when the matrix holds too
    few grouped tasks."""
    correlation = pd.read_csv(xp.current("sft_fig2_change_correlation.csv"), index_col=0)
    overlap = input_overlap([load_task(name) for name in correlation.index])
    table = task_grouping(correlation, SMOLLM2_GROUPS, overlap)
    if table is not None:
        _save(xp, table, "sft_fig2_grouping")
        _save(xp, overlap, "sft_input_overlap")
    return table


def seed_statistics(xp: Experiment, changes: pd.DataFrame, seed: int) -> None:
    """Table 1's changes with intervals of one seed (`statistic_changes`) into
    `sft_table1_intervals.csv`, beside the other seeds' rows (a seed run again replaces its own),
    and their reading over the seeds (`change_consistency`) as `sft_table1_seeds.csv`."""
    path = xp.current(f"{INTERVALS}.csv")
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["seed"])
    kept: pd.DataFrame = old.loc[old["seed"] != seed]
    table = pd.concat([kept, changes.assign(seed=seed)], ignore_index=True)
    table = table.sort_values(by="seed", kind="stable", ignore_index=True)
    _save(xp, table, INTERVALS)
    _save(xp, change_consistency(table), "sft_table1_seeds")


def _example_patterns(model, tasks: Sequence[Task], config: FinetuneConfig) -> dict[str, torch.Tensor]:
    """Every held-out example's pattern, on the examples (and prompts) `finetune_` takes its patterns on."""
    probes = [pattern_subset(t, config.pattern_examples) for t in tasks]
    return {
        t.name: example_patterns(model, tokenize_task(model, t, split="eval", instructed=config.instructed))
        for t in probes
    }


def sft_smollm2(
    xp: Experiment, tasks: Sequence[str] | None, *, runs: str | Path, steps: int, seed: int, masks: str | None
) -> dict[str, Any]:
    """LoRA SFT of the loaded model on function-vector tasks (default `SMOLLM2_TASKS`): the run's
    tables, Table 1's changes with intervals over the held-out examples (`seed_statistics`), the
    fine-tuned model's held-out outputs and scores, the grouping test and the overlap of the changes
    with the Heads-up masks stored in `masks` (default `<out>/masks`). The recipe."""
    loaded = [load_task(n) for n in tasks or SMOLLM2_TASKS]
    config = smollm2_sft_config(steps, seed)
    # The run folder is named after the model (`smollm2_sft_seed0` for SmolLM2), so that another
    # model's run never resumes from SmolLM2's checkpoints.
    run_dir = Path(runs) / f"{model_slug(xp.options.model)}_sft_seed{seed}"
    before = _example_patterns(xp.model, loaded, config)  # the model before SFT, example by example
    result = finetune_(xp.model, loaded, config, out_dir=run_dir)
    after = _example_patterns(xp.model, loaded, config)
    seed_statistics(xp, statistic_changes(before, after, seed=seed), seed)
    scores, shown = held_out_outputs(xp.model, loaded, config.pattern_examples, instructed=config.instructed)
    _save(xp, shown, "sft_generations")
    _save(xp, scores, "sft_final_scores")
    write_sft_run(xp, result, config, seed=seed)
    sft_grouping(xp)
    paths = {t.name: stored_mask_path(masks or xp.out / "masks", t) for t in loaded}
    found = {name: HeadMask.load(path) for name, path in paths.items() if path.is_file()}
    # The stored masks are seed 0's: does that mask do its task (the verdicts' rule)?
    eliciting = {name: ANALYSED_SEED in eliciting_seeds(xp.out, name) for name in found}
    _save(xp, mask_overlap(run_changes(result), found, eliciting), "sft_mask_overlap")
    recipe = ("steps", "batch_size", "lr", "method", "lora_rank", "lora_alpha", "lora_targets", "instructed")
    return {k: getattr(config, k) for k in recipe}


def sft_selection(
    xp: Experiment,
    config: SelectionConfig,
    *,
    base: str | Path,
    runs: str | Path,
    candidates: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Pattern-guided data selection (Tables 2/3) on the loaded model's kind: on the organism the base
    organism (`base`; an organism task is named with or without `organism/`), else fresh copies of the
    loaded model per run. Runs (resumable) under `<runs>/<model>_sft_selection`; writes the ranking,
    runs, generations, summary, similarity-vs-loss tables and the figure. The settings."""
    name, organism = xp.options.model, xp.is_organism
    if organism:
        load = reloading(load_model(str(base_organism(base, threads=torch.get_num_threads())), dtype="float32"))
    else:
        load = lambda: load_model(name, dtype="float32")  # noqa: E731 (a fresh copy per run)

    def resolve(task: str) -> Task:
        return load_task(f"organism/{task.removeprefix('organism/')}" if organism else task)

    chosen = [resolve(n) for n in candidates or config.candidates]
    aims = [resolve(n) for n in targets or config.targets]
    result = data_selection(load, chosen, aims, config, Path(runs) / f"{name}_sft_selection", log=print)
    for suffix, table in (("_ranking", result.ranking), ("_runs", result.runs), ("_generations", result.generations)):
        _save(xp, table, f"sft_data_selection{suffix}")
    _save(xp, selection_summary(result.runs), "sft_data_selection")
    _save(xp, similarity_vs_loss(result.runs), "sft_data_selection_similarity")
    xp.figure(data_selection_figure(result.runs), "sft_data_selection")
    return {k: v for k, v in config.settings([t.name for t in chosen]).items() if k != "probe"}


def sft_time(xp: Experiment, stage: str, seconds: float, settings: dict[str, Any]) -> None:
    """One row more in `sft_times.csv`: the stage, its wall time, the torch threads and its settings."""
    row = {"stage": stage, "wall_s": round(seconds, 1), "threads": torch.get_num_threads()}
    path = xp.current(TIMES)
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    row = pd.DataFrame([{**row, "settings": json.dumps(settings)}])
    _save(xp, pd.concat([old, row], ignore_index=True), TIMES.removesuffix(".csv"))
