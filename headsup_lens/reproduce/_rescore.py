"""Every committed generation table scored again by the current metrics, and every table of scores
read from it recomputed: no model runs.

A score table (a settings table, the cross-task swaps, the random masks' draws, a schedule curve, ...)
has one row per group of stored outputs. `rescore_table` finds each row's outputs by the columns the
two tables share (`KEYS`: task, setting, mask, draw, step, ...), scores them with `score_outputs` (the
primary metric `paper_hit`, the strict matcher, echo and empty outputs, labels) and writes the scores
into the row; every other column (losses, heads kept, ...) is kept. `rescore_folder` does this for
every pair of tables a results folder holds (`PAIRS`) and for the summaries made from them.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pandas as pd

from .._io import atomic_write, find_table, read_table
from ..data import Task, load_task
from ..evaluation import RandomMaskControl, mcnemar_exact, score_outputs, setting_of, task_labels
from ..evaluation._settings import REFERENCE_SETTINGS

# Columns that name a group of outputs; a row's outputs are those agreeing with it on every shared one.
KEYS = ("task", "mask_task", "setting", "prompt", "gate", "mask", "draw", "step", "shots")
PER_EXAMPLE = ("correct", "substring", "strict", "echo", "empty", "gold_label", "predicted_label")
TEXT = {"input": str, "answer": str, "output": str, "generation": str, "setting": str, "task": str, "mask_task": str}
TaskOf = Callable[[str], Task]


def read_generations(path: str | os.PathLike) -> pd.DataFrame:
    """A stored generations table with its texts as text (an empty output stays empty)."""
    return read_table(path, keep_default_na=False, dtype=TEXT)


def _output_column(generations: pd.DataFrame) -> str:
    for column in ("output", "generation"):
        if column in generations.columns:
            return column
    raise ValueError("a generations table needs an 'output' (or 'generation') column")


def _same(values: pd.Series, value: object) -> pd.Series:
    """Cells equal to `value`, comparing as text (a CSV reads 1 and "1" alike; empty cells match NaN)."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    if isinstance(value, float) and value.is_integer():
        text = str(int(value))
    cells = values.astype(str).where(values.notna(), "").str.replace(r"\.0$", "", regex=True)
    return cells == text


def rescore_generations(generations: pd.DataFrame, task_of: TaskOf, task: str | None = None) -> pd.DataFrame:
    """`generations` with its per-example scores (`PER_EXAMPLE`) recomputed, each row against its own
    task (the `task` column, else `task`)."""
    out = _output_column(generations)
    frame = generations.copy()
    names = frame["task"].tolist() if "task" in frame.columns else [task] * len(frame)
    if any(name is None or name == "" for name in names):
        raise ValueError("generations without a 'task' column need the task's name")
    columns: dict[str, list] = {}
    for name in dict.fromkeys(names):
        rows = [i for i, n in enumerate(names) if n == name]
        part = frame.iloc[rows]
        t = task_of(str(name))
        labels = task_labels(t) if "gold_label" in frame.columns else None
        _, per = score_outputs(t, part[out].tolist(), part["input"].tolist(), part["answer"].tolist(), labels)
        for column, values in per.items():
            columns.setdefault(column, [None] * len(frame))
            for i, value in zip(rows, values):
                columns[column][i] = value
    for column, values in columns.items():
        if column in frame.columns or column == "substring":
            frame[column] = values
    return frame


def rescore_table(
    table: pd.DataFrame, generations: pd.DataFrame, task_of: TaskOf, *, task: str | None = None
) -> pd.DataFrame:
    """`table` with each row's scores recomputed from its outputs in `generations` (see the module's
    docstring). A row whose outputs are missing is a ValueError, unless it holds no accuracy (a row
    scored by its answer loss only); `task` names the task where neither table has a `task` column."""
    keys = [k for k in KEYS if k in table.columns and k in generations.columns]
    out = _output_column(generations)
    rows = []
    hits: dict[int, list[bool]] = {}
    for index, record in enumerate(table.to_dict("records")):
        selected = pd.Series(True, index=generations.index)
        for key in keys:
            if record[key] != "-":  # "-": the row has none (the full model's row of a gate or mask table)
                selected &= _same(generations[key], record[key])
        group = generations.loc[selected]
        for key in keys:  # a "-" row whose outputs were stored once per value (the same outputs): the first
            if record[key] == "-" and len(group) and group[key].nunique() > 1:
                group = group.loc[group[key] == group[key].iloc[0]]
        if "example" in group.columns:
            group = group.sort_values("example", kind="mergesort")
        if group.empty:
            if "accuracy" in record and pd.notna(record["accuracy"]):
                shown = {k: record[k] for k in keys}
                raise ValueError(f"no stored outputs for the row {shown} (matched on {keys})")
            rows.append(record)
            continue
        size = record.get("n_examples", record.get("n"))
        if size is not None and not pd.isna(size) and int(size) != len(group):
            raise ValueError(
                f"the row { ({k: record[k] for k in keys}) } counts {int(size)} examples, its outputs {len(group)}"
            )
        name = str(record.get("task", group["task"].iloc[0] if "task" in group.columns else task))
        t = task_of(name)
        labels = task_labels(t) if "balanced_accuracy" in table.columns or "gold_label" in group.columns else None
        scores, per = score_outputs(t, group[out].tolist(), group["input"].tolist(), group["answer"].tolist(), labels)
        hits[index] = per["correct"]
        rows.append(
            record | {k: v for k, v in scores.items() if k in table.columns or k in ("metric", "substring_accuracy")}
        )
    frame = pd.DataFrame(rows)
    _paired_tests(frame, hits)
    order = list(table.columns) + [c for c in ("metric", "substring_accuracy") if c not in table.columns]
    return cast(pd.DataFrame, frame[[c for c in order if c in frame.columns]])


def _paired_tests(frame: pd.DataFrame, hits: dict[int, list[bool]]) -> None:
    """McNemar p-values of the masked rows against the reference rows of the same task (and prompt)."""
    for reference in REFERENCE_SETTINGS:
        column = f"p_vs_{reference}"
        if column not in frame.columns or "setting" not in frame.columns:
            continue
        values = []
        for index, record in frame.iterrows():
            setting = setting_of(str(record["setting"]))
            same = frame.setting.astype(str) == reference
            for key in ("task", "prompt"):
                if key in frame.columns:
                    same &= frame[key].astype(str) == str(record[key])
            ref = [int(i) for i in frame.index[same]]
            mine = hits.get(int(index))  # type: ignore[arg-type]
            if setting is None or not setting.paired or not ref or ref[0] not in hits or mine is None:
                values.append(record[column] if bool(pd.isna(record[column])) else math.nan)
                continue
            values.append(mcnemar_exact(mine, hits[ref[0]]))
        frame[column] = values


# ---------------------------------------------------------------------------------------------- a folder
# (score table, its generations) by file name: `{x}` is the part after the artifact's prefix.
PAIRS: tuple[tuple[str, str], ...] = (
    ("tables12_evaluation{x}", "tables12_generations{x}"),
    ("fewshot_evaluation{x}", "fewshot_generations{x}"),
    ("random_masks{x}", "random_masks_generations{x}"),
    ("random_masks_fluent{x}", "random_masks_fluent_generations{x}"),
    ("schedule_curve{x}", "schedule_generations{x}"),
    ("query_gate{x}", "query_gate_generations{x}"),
    ("table7_evaluation{x}", "table7_generations{x}"),
    ("table3_fewshot{x}", "table3_generations{x}"),
    ("table40_ffn_mask{x}", "table40_generations{x}"),
)


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".csv")


Writer = Callable[[Path, pd.DataFrame], None]


def write_in_place(path: Path, frame: pd.DataFrame) -> None:
    """Write a table back where it was read (gzipped where it was, with the same bytes for the same table)."""
    how = {"method": "gzip", "mtime": 0} if path.name.endswith(".gz") else None
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False, compression=how))


def _files(folder: Path, pattern: str) -> list[Path]:
    found = {_stem(p): p for p in sorted(folder.glob(pattern + ".csv")) + sorted(folder.glob(pattern + ".csv.gz"))}
    return [found[k] for k in sorted(found)]


def rescore_folder(
    folder: str | os.PathLike, data_dir: str | None = None, write: Writer = write_in_place
) -> list[Path]:
    """Every generations table of a results folder and its score tables rescored (`PAIRS`; the
    cross-task swaps and the random masks' summaries; the combined tables over the folder's tasks), and
    the same in every folder below it, each written by `write(path, table)` (default: in place; the
    experiment scripts pass their locked, all-or-nothing writer). Everything is read and scored before
    the first table is written, so a damaged table stops the rescoring with nothing changed. The files
    written."""
    task_of = _task_loader(data_dir)
    pending: dict[Path, pd.DataFrame] = {}
    for here in sorted({p.parent for p in Path(folder).rglob("*generations*.csv*")}):
        pending |= _rescore_here(here, task_of)
    for path, frame in pending.items():
        write(path, frame)
    return list(pending)


def _task_loader(data_dir: str | None) -> TaskOf:
    @functools.cache
    def task_of(name: str) -> Task:
        return load_task(name, data_dir)

    return task_of


def _rescore_here(folder: Path, task_of: TaskOf) -> dict[Path, pd.DataFrame]:
    try:
        return _rescore_files(folder, task_of)
    except ValueError as error:
        raise ValueError(f"{folder}: {error}") from None


def _rescore_files(folder: Path, task_of: TaskOf) -> dict[Path, pd.DataFrame]:
    written: dict[Path, pd.DataFrame] = {}
    generations_of: dict[Path, pd.DataFrame] = {}
    for path in [p for p in folder.iterdir() if re.search(r"generations.*\.csv(\.gz)?$", p.name)]:
        frame = read_generations(path)
        if not {"input", "answer", "correct"} <= set(frame.columns) or not (
            {"output", "generation"} & set(frame.columns)
        ):
            continue  # not scored outputs (a removal sweep's continuations, translations scored by ROUGE)
        task = _single_task(folder, path)
        generations_of[path] = rescore_generations(frame, task_of, task)
        written[path] = generations_of[path]
    for table_pattern, generations_pattern in PAIRS:
        prefix = generations_pattern.removesuffix("{x}")
        for gpath in [p for p in generations_of if _stem(p).startswith(prefix)]:
            suffix = _stem(gpath).removeprefix(prefix)
            tpath = find_table(folder, table_pattern.format(x=suffix))
            if tpath is None:
                continue
            table = read_table(tpath, keep_default_na=False, na_values=[""])
            task = _single_task(folder, gpath)
            try:
                written[tpath] = rescore_table(table, generations_of[gpath], task_of, task=task)
            except ValueError as error:
                raise ValueError(f"{tpath.name} from {gpath.name}: {error}") from None
            if table_pattern.startswith("random_masks"):
                written |= _random_summary(folder, written[tpath], table_pattern.removesuffix("{x}"), suffix)
        # The combined table over the folder's tasks (`tables12_evaluation.csv` of a model's folder).
        combined = find_table(folder, table_pattern.format(x=""))
        parts = [p for p in generations_of if _stem(p).startswith(prefix + "_")]
        if combined is not None and parts and combined not in written:
            table = read_table(combined, keep_default_na=False, na_values=[""])
            every = pd.concat([generations_of[p] for p in parts], ignore_index=True)
            written[combined] = rescore_table(table, every, task_of)
    for gpath in generations_of:  # `<name>_generations.csv` beside `<name>.csv` (Table 3's parts)
        tpath = find_table(folder, _stem(gpath).removesuffix("_generations"))
        if _stem(gpath).endswith("_generations") and tpath is not None and tpath not in written:
            table = read_table(tpath, keep_default_na=False, na_values=[""])
            written[tpath] = rescore_table(table, generations_of[gpath], task_of)
    cross = [p for p in generations_of if _stem(p).startswith("cross_task_generations_")]
    if cross:
        every = pd.concat([generations_of[p] for p in cross], ignore_index=True)
        for tpath in _files(folder, "cross_task*"):
            if "generations" not in tpath.name:
                written[tpath] = rescore_table(read_table(tpath), every, task_of)
    written |= _pivots(folder, written)
    for artifact in ("random_masks", "random_masks_fluent"):
        if any(_stem(p).startswith(f"{artifact}_generations") for p in generations_of):
            written |= _combined_random_summary(folder, written, artifact)
    return written


def _pivots(folder: Path, written: dict[Path, pd.DataFrame]) -> dict[Path, pd.DataFrame]:
    """The summaries that pivot a rescored table: `tables12_summary.csv` (accuracy per task and setting)
    and `table3_summary.csv` (`<prompt> <setting> (accuracy|strict)` per task); their other columns kept."""
    found: dict[Path, pd.DataFrame] = {}
    for table_stem, summary_stem in (("tables12_evaluation", "tables12_summary"), ("table3_fewshot", "table3_summary")):
        table_path, summary_path = find_table(folder, table_stem), find_table(folder, summary_stem)
        if table_path is None or summary_path is None or table_path not in written:
            continue
        table, summary = written[table_path], read_table(summary_path)
        values = {}
        for record in table.to_dict("records"):
            for metric in ("accuracy", "strict"):
                name = f"{record['prompt']} {record['setting']} ({metric})" if "prompt" in record else record["setting"]
                if metric == "accuracy" or "prompt" in record:
                    values[(record["task"], name)] = record[metric]
        for column in summary.columns:
            cells = [values.get((task, column)) for task in summary.task]
            if all(cell is not None for cell in cells):
                summary[column] = cells
        found[summary_path] = summary
    return found


def _single_task(folder: Path, path: Path) -> str | None:
    """The task of a single-task folder's table without a `task` column (a schedule curve's), from its
    score table's `task` column."""
    stem = _stem(path).replace("generations", "curve") if "schedule" in path.name else None
    if stem is None:
        return None
    curve = find_table(folder, stem)
    return str(read_table(curve).task.iloc[0]) if curve is not None else None


def _random_summary(folder: Path, draws: pd.DataFrame, artifact: str, suffix: str) -> dict[Path, pd.DataFrame]:
    """`<artifact>_summary<suffix>.csv` again from the rescored draws (its metrics kept)."""
    summary_path = find_table(folder, f"{artifact}_summary{suffix}")
    if summary_path is None:
        return {}
    old = read_table(summary_path)
    control = RandomMaskControl(str(draws.task.iloc[0]), str(draws.within.iloc[0]), draws, pd.DataFrame())
    return {summary_path: cast(pd.DataFrame, control.summary(tuple(old.metric))[list(old.columns)])}


def _combined_random_summary(
    folder: Path, written: dict[Path, pd.DataFrame], artifact: str
) -> dict[Path, pd.DataFrame]:
    """The folder's `<artifact>_summary.csv` (every task's and seed's summary, with the `seed`)."""
    path = find_table(folder, f"{artifact}_summary")
    if path is None:
        return {}
    old = read_table(path)
    parts = []
    for summary in _files(folder, f"{artifact}_summary_*"):
        match = re.fullmatch(rf"{artifact}_summary_seed(\d+)_.*", _stem(summary))
        frame = written[summary] if summary in written else read_table(summary)
        parts.append((int(match.group(1)) if match else 0, summary.name, frame))
    parts = [
        part.assign(seed=seed) if "seed" in old.columns else part
        for seed, _, part in sorted(parts, key=lambda p: p[:2])
    ]
    combined = pd.concat(parts, ignore_index=True)
    return {path: cast(pd.DataFrame, combined[list(old.columns)])}
