"""Table 3: few-shot masks and the hybrid mask, evaluated on 0-shot and k-shot prompts.

Each task's rows and generations are kept as a *part* (`<parts>/<task>-<key>-<shared key>.csv`, with
`_generations.csv` beside it) as it finishes, so a stopped run resumes at the next task and tasks
run in separate invocations with the same hybrid mask end up in one table. A part's keys say what its
rows were computed from (`rows_key`): a stale part is never reused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from transformer_lens.model_bridge import TransformerBridge

from .._io import atomic_write, read_table
from ..data import FV_TASKS, HYBRID_UNSEEN, Task, fewshot, load_task, task_mixture
from ..data import data_dir as find_data_dir
from ..evaluation import EvalConfig, evaluate
from ..masks import HeadMask
from ..models import fingerprint
from ..training import safe_name
from ._masks import mask_on_another_task

HYBRID_FILE = "fewshot/hybrid"
# The rows of the summary and the accuracy columns it shows.
SUMMARY_SETTINGS = ("original", "instructed", "masked", "random mask", "hybrid mask")


def fewshot_task_names(data_dir: str | os.PathLike | None = None) -> list[str]:
    """Every task with a few-shot file in the data directory (`function_vectors/fewshot/*.json`,
    the hybrid mixture's own file aside): the paper's Table 3 tasks."""
    folder = find_data_dir(data_dir) / "function_vectors" / "fewshot"
    names = sorted(p.stem for p in folder.glob("*.json") if p.stem != "hybrid")
    if not names:
        raise ValueError(f"no few-shot files in {folder}; name the tasks")
    return names


def fewshot_hybrid_task(
    tasks: Sequence[Task], mixture: Sequence[str] | None, *, shots: int = 5, data_dir: str | os.PathLike | None = None
) -> tuple[Task, dict[str, bool]]:
    """The hybrid task and, per task of `tasks`, whether the hybrid saw it. `mixture=None` is the
    shared `fewshot/hybrid.json` (31 function-vector tasks, never those of `HYBRID_UNSEEN`); a list
    of task names mixes their `shots`-shot variants."""
    if mixture is None:
        hybrid = load_task(HYBRID_FILE, data_dir)
        return hybrid, {t.name: t.name in FV_TASKS and t.name not in HYBRID_UNSEEN for t in tasks}
    parts = [fewshot(load_task(name, data_dir), k=shots) for name in mixture]
    hybrid = task_mixture(parts, f"fewshot/hybrid_{'+'.join(n.removeprefix('organism/') for n in mixture)}")
    return hybrid, {t.name: t.name in mixture for t in tasks}


def rows_key(model: TransformerBridge, masks: Sequence[HeadMask], options: Sequence[int | float | str] = ()) -> str:
    """A short key of what rows were computed from: the model (its fingerprint, the one weights
    identity), the masks (their values) and the options."""
    digest = hashlib.sha256((fingerprint(model).content_hash or "").encode())
    for mask in masks:
        digest.update(mask.values.numpy().tobytes())
    digest.update(repr(list(options)).encode())
    return digest.hexdigest()[:10]


def fewshot_rows(
    model: TransformerBridge,
    task: Task,
    shot_task: Task,
    mask: HeadMask,
    hybrid: HeadMask,
    *,
    hybrid_name: str,
    seen: bool,
    shots: int = 5,
    alpha: float = 0.25,
    seed: int = 0,
    batch_size: int = 64,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One task's rows of Table 3 and the generations behind them (`evaluate` with its controls).

    Prompt "0-shot" (`task`): original and instructed (the zero-shot baselines) and the few-shot
    `mask` without demonstrations. Prompt "<k>-shot" (`shot_task`, `hl.data.fewshot`): original (the
    few-shot baseline; `shots` demonstrations), instructed, the mask ("masked"), its random shuffle, the `hybrid` mask
    ("hybrid mask", trained on `hybrid_name`), the instructed + scaled mask and the controls.
    """
    config = EvalConfig(alpha=alpha, random_seed=seed, batch_size=batch_size)
    with mask_on_another_task():  # the few-shot mask on zero-shot prompts
        result0 = evaluate(model, task, mask, config)
    # The hybrid mask takes evaluate's slot for a second mask (the paper's other model's mask).
    result5 = evaluate(model, shot_task, mask, config, other_mask=hybrid)
    table0, gen0, table5, gen5 = result0.table, result0.generations, result5.table, result5.generations
    prompt = f"{shots}-shot"
    rename = {"other model's mask": "hybrid mask"}
    table5 = table5.assign(prompt=prompt, setting=table5.setting.replace(rename))
    table5["mask_task"] = table5["mask_task"].astype(object)  # all NaN (float) for masks without a task
    table5.loc[table5.setting == "hybrid mask", "mask_task"] = hybrid_name
    table: pd.DataFrame = pd.concat([table0.assign(prompt="0-shot"), table5], ignore_index=True)
    table = table.assign(task=task.name, seen_by_hybrid=seen)
    generations = pd.concat(
        [gen0.assign(prompt="0-shot"), gen5.assign(prompt=prompt, setting=gen5.setting.replace(rename))],
        ignore_index=True,
    ).assign(task=task.name)
    return table.loc[:, ["task", "prompt", *[c for c in table.columns if c not in ("task", "prompt")]]], generations


def save_part(parts: str | os.PathLike, stem: str, table: pd.DataFrame, generations: pd.DataFrame) -> Path:
    """Keep one task's rows as `<parts>/<stem>.csv` (generations first, so a part is complete when its table exists)."""
    path = Path(parts) / f"{stem}.csv"
    atomic_write(path.with_name(f"{stem}_generations.csv"), lambda tmp: generations.to_csv(tmp, index=False))
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.6g"))
    return path


def part_stem(task: Task, key: str, shared: str) -> str:
    """A part's file stem: the task, its own key (its mask) and the key it shares (hybrid mask, options)."""
    return f"{safe_name(task.name)}-{key}-{shared}"


def load_parts(parts: str | os.PathLike, shared: str, first: Sequence[str] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every task's rows and generations kept with the shared key `shared` (the newest part of each
    task): the tasks of `first` in that order, then the others by name."""
    found = sorted(Path(parts).glob(f"*-{shared}.csv"), key=lambda path: path.stat().st_mtime)
    newest = {pd.read_csv(path, usecols=["task"]).task.iloc[0]: path for path in found}
    missing = [name for name in first if name not in newest]
    if missing:
        raise ValueError(f"no rows kept for {missing} in {parts}")
    order = list(first) + sorted(set(newest) - set(first))
    table = pd.concat([pd.read_csv(newest[name]) for name in order], ignore_index=True)
    texts = [read_table(newest[name].with_name(f"{newest[name].stem}_generations.csv")) for name in order]
    return table, pd.concat(texts, ignore_index=True)


def fewshot_summary(table: pd.DataFrame, *, hybrid: HeadMask, hybrid_name: str) -> pd.DataFrame:
    """One row per task (in the table's order): accuracy and strict score of each prompt and setting
    of `SUMMARY_SETTINGS`, whether the hybrid saw the task, and the heads the masks keep."""
    rows = table[table.setting.isin(SUMMARY_SETTINGS)]
    columns = rows.prompt + " " + rows.setting
    summary = pd.concat(
        {
            metric: rows.assign(column=columns).pivot(index="task", columns="column", values=metric)
            for metric in ("accuracy", "strict")
        },
        axis=1,
    )
    summary.columns = [f"{setting} ({metric})" for metric, setting in summary.columns]
    masked = rows.loc[(rows.prompt != "0-shot") & (rows.setting == "masked")].set_index("task")
    return (
        summary.reindex(list(dict.fromkeys(table.task)))
        .reset_index()
        .assign(
            seen_by_hybrid=lambda s: s.task.map(table.groupby("task").seen_by_hybrid.first()),
            heads_kept_5shot=lambda s: s.task.map(masked.n_kept),
            heads_kept_hybrid=hybrid.n_kept,
            hybrid=hybrid_name,
        )
    )
