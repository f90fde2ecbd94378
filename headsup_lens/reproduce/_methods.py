"""Head-finding methods compared on several tasks, resumably (`experiments/methods_compare.py`).

Per task, `<folder>/<task>/` holds one `<method>.json` ranking each (saved as it finishes), the
elicitation curves (`curves.csv`) and the task's summary (`summary.csv`, written last: it marks the
task done). A rerun loads what exists and computes only the rest; every file is written atomically.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from transformer_lens.model_bridge import TransformerBridge

from .._io import atomic_write
from .._validate import check_int
from ..analysis import HeadScores, MethodComparison, auroc, compare_methods, head_scores, planted_heads, precision_at
from ..data import Task
from ..masks import HeadMask
from ..training import TrainConfig, safe_name, train_mask, train_masks

SUMMARY = "summary.csv"
CURVES = "curves.csv"


def learned_rankings(
    model: TransformerBridge,
    tasks: Sequence[Task],
    *,
    config: TrainConfig | None = None,
    masks_dir: str | os.PathLike | None = None,
    cost_steps: int = 10,
) -> dict[str, HeadScores]:
    """The paper's learned mask of each task as a ranking, with its training cost.

    Trained here for all tasks at once with `config` (cost: the training time divided by the number
    of tasks), or read from `<masks_dir>/<task>.safetensors` (cost: `cost_steps` timed training
    steps of the mask's recipe, scaled to its step count).
    """
    if masks_dir is None:
        config = (config or TrainConfig.fast()).replace(progress=False, checkpoint_every=0)
        start, cpu_start = time.perf_counter(), time.process_time()
        results = train_masks(model, list(tasks), config)
        seconds = (time.perf_counter() - start) / len(tasks)
        cpu_seconds = (time.process_time() - cpu_start) / len(tasks)
        out = {}
        for task in tasks:
            ranking = head_scores(model, task, "learned_mask", mask=results[task.name].mask, n_examples=1)
            ranking.seconds, ranking.cpu_seconds = seconds, cpu_seconds
            ranking.settings.update(
                source="trained",
                cost="training time / tasks trained together",
                tasks_together=len(tasks),
                **config.recipe(),
            )
            out[task.name] = ranking
        return out
    cost_steps = check_int("cost_steps", cost_steps, minimum=1)
    paths = {task.name: Path(masks_dir) / f"{safe_name(task.name)}.safetensors" for task in tasks}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ValueError(f"masks_dir {masks_dir}: no stored mask {', '.join(missing)}")
    out = {}
    for task in tasks:
        mask = HeadMask.load(paths[task.name], model)
        steps = int(mask.metadata.get("steps", TrainConfig().steps))
        probe = TrainConfig.fast(
            steps=cost_steps,
            init_mean=float(mask.metadata.get("init_mean", 2.0)),
            progress=False,
            checkpoint_every=0,
        )
        start, cpu_start = time.perf_counter(), time.process_time()
        train_mask(model, task, probe)
        ranking = head_scores(model, task, "learned_mask", mask=mask, n_examples=1)
        ranking.seconds = (time.perf_counter() - start) * steps / cost_steps
        ranking.cpu_seconds = (time.process_time() - cpu_start) * steps / cost_steps
        ranking.settings.update(cost="extrapolated", cost_steps=cost_steps, trained_steps=steps)
        out[task.name] = ranking
    return out


@dataclass
class MethodsRun:
    """`summary`: every task's method summary (one row per task and method, with `task` and
    `curve_seconds`); `comparisons`: the tasks compared by this call (the others were found done)."""

    summary: pd.DataFrame
    comparisons: dict[str, MethodComparison] = field(default_factory=dict)


def _write_csv(path: Path, frame: pd.DataFrame) -> Path:
    return atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"))


def _ranking(
    model: TransformerBridge, task: Task, method: str, path: Path, settings: Mapping[str, Any], log: bool
) -> HeadScores:
    """The saved ranking at `path`, else one computed now and saved."""
    if path.is_file():
        return HeadScores.load(path)
    ranking = head_scores(model, task, method, **settings)
    ranking.save(path)
    if log:
        print(f"[methods] {task.name} {method}: {ranking.seconds:.1f} s")
    return ranking


def compare_methods_on_tasks(
    model: TransformerBridge,
    tasks: Sequence[Task],
    methods: Sequence[str],
    folder: str | os.PathLike,
    *,
    learned: Mapping[str, Any] | None = None,
    k_max: int = 24,
    k_step: int = 2,
    n_eval: int = 24,
    n_examples: int = 16,
    seed: int = 0,
    max_rows: int = 256,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    log: bool = True,
) -> MethodsRun:
    """`compare_methods` on each task, resumable in `folder` (see the module docstring).

    Methods are scored with `n_examples`, `seed`, `max_rows` and `options[method]`; the learned
    masks' rankings come from `learned_rankings(model, tasks, **learned)` for the tasks that lack
    one, all at once. The curves cover k = 0, k_step, ..., k_max on `n_eval` examples.
    """
    folder = Path(folder)
    for name, value in (("k_max", k_max), ("k_step", k_step), ("n_eval", n_eval), ("n_examples", n_examples)):
        check_int(name, value, minimum=0 if name == "k_max" else 1)
    options = dict(options or {})
    done = {t.name for t in tasks if (folder / safe_name(t.name) / SUMMARY).is_file()}
    untrained = [
        t for t in tasks if t.name not in done and not (folder / safe_name(t.name) / "learned_mask.json").is_file()
    ]
    if "learned_mask" in methods and untrained:
        for name, ranking in learned_rankings(model, untrained, **dict(learned or {})).items():
            ranking.save(folder / safe_name(name) / "learned_mask.json")  # at once: a stopped run keeps them
    summaries, comparisons = [], {}
    for task in tasks:
        here = folder / safe_name(task.name)
        if task.name in done:
            summaries.append(pd.read_csv(here / SUMMARY))
            continue
        settings = dict(n_examples=n_examples, seed=seed, max_rows=max_rows)
        rankings = [
            _ranking(model, task, m, here / f"{m}.json", {**settings, **dict(options.get(m, {}))}, log) for m in methods
        ]
        comparison = compare_methods(
            model, task, rankings, k_max=k_max, k_step=k_step, n_eval=n_eval, max_rows=max_rows
        )
        _write_csv(here / CURVES, comparison.curves)
        summary = comparison.summary.assign(task=task.name, curve_seconds=comparison.settings["curve_seconds"])
        _write_csv(here / SUMMARY, summary)  # last: marks the task done
        if log:
            print(summary.to_string(index=False, float_format="{:.3f}".format))
        summaries.append(summary)
        comparisons[task.name] = comparison
    return MethodsRun(pd.concat(summaries, ignore_index=True), comparisons)


def ranking_table(
    model: TransformerBridge,
    tasks: Sequence[Task],
    methods: Sequence[str],
    folder: str | os.PathLike,
    *,
    n_examples: int = 16,
    seed: int = 0,
    max_rows: int = 256,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    log: bool = True,
) -> pd.DataFrame:
    """Rank heads with every method but the learned mask (whose rankings `compare_methods_on_tasks`
    saves) where `folder` has no ranking yet, then one row per (task, method) ranking found: its cost
    and, against the planted heads where known, `auroc` and `precision_at_planted`."""
    folder, options = Path(folder), dict(options or {})
    settings = dict(n_examples=n_examples, seed=seed, max_rows=max_rows)
    records = []
    for task in tasks:
        planted = planted_heads(task, model)
        for method in methods:
            path = folder / safe_name(task.name) / f"{method}.json"
            if method == "learned_mask" and not path.is_file():
                continue
            ranking = _ranking(model, task, method, path, {**settings, **dict(options.get(method, {}))}, log)
            records.append(
                {
                    "task": task.name,
                    "method": method,
                    "seconds": ranking.seconds,
                    "cpu_seconds": ranking.cpu_seconds,
                    "auroc": auroc(ranking, planted) if planted else float("nan"),
                    "precision_at_planted": precision_at(ranking, planted) if planted else float("nan"),
                }
            )
    return pd.DataFrame.from_records(records)


def auroc_table(table: pd.DataFrame) -> pd.DataFrame:
    """AUROC per method (rows, index `method`) and task (columns, organism tasks without their
    `organism/` prefix), with the `mean` over tasks; best method first."""
    missing = {"task", "method", "auroc"} - set(table.columns)
    if missing:
        raise ValueError(f"the table has no column {sorted(missing)}")
    aurocs = table.pivot(index="method", columns="task", values="auroc")
    aurocs.columns = [c.removeprefix("organism/") for c in aurocs.columns]
    aurocs["mean"] = aurocs.mean(axis=1)
    return aurocs.sort_values("mean", ascending=False)
