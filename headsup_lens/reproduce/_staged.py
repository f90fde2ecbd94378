"""The paper's experiments on a real LLM in stages over masks stored in the output folder
(`experiments/smollm2.py`: SmolLM2-135M-Instruct, hours per stage on a CPU).

`select_tasks` scans tasks for greedy accuracy with and without instruction (resumable);
`train_stored_masks` trains masks and keeps only the final ones in `<out>/masks/`
(`<task>.safetensors` for seed 0, `<task>_seed<k>.safetensors` for the others); `settings_table`
evaluates a task's stored masks (Tables 1/2), `fewshot_table` the same mask on k-shot prompts beside
the few-shot baseline (Table 3's framing), `add_seed_rows` appends the rows of a seed mask stored
later, `rescore_stored` scores stored generations again; `analyze_task` writes the per-task analyses
(Fig. 2, Fig. 4, Table 41, Fig. 6) and `combine_tables` the tables over every analysed task (Table 5,
the mask heat map, `summary_markdown`). Every table is written with every digit (`float_format=None`),
as the committed `figures/smollm2/` tables were, so `rescore` reproduces them exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from .._io import atomic_write, read_table
from ..analysis import (
    Setting,
    alpha_grid,
    jaccard_matrix,
    jaccard_table,
    layer_similarity,
    logit_lens,
    random_order,
    removal_sweep,
    weight_order,
)
from ..data import Task, fewshot, load_task
from ..evaluation import EvalConfig, accuracy, evaluate, rescore
from ..masks import HeadMask
from ..plots import alpha_figure, jaccard_figure, logit_lens_figure, mask_heatmap, rank_figure, similarity_figure
from ..training import TrainConfig, TrainResult, safe_name, train_masks
from ._experiment import Experiment, timed
from ._masks import mask_on_another_task, stored_mask_path
from ._rescore import rescore_folder

TEXT_COLUMNS = {"input": str, "answer": str, "output": str}  # stored generations: text stays text
N_SIMILARITY = 10  # held-out inputs averaged in the layer-similarity figure
SELECTION_LOG = "task_selection_long.csv"
SUMMARY_SETTINGS = (
    "original",
    "instructed",
    "masked",
    "random mask",
    "instructed + scaled mask",
    "echo baseline",
    "majority label",
)


def _full(xp: Experiment, frame: pd.DataFrame, name: str) -> None:
    xp.table(frame, name, float_format=None)


# ---------------------------------------------------------------------------------------------- select
def select_tasks(
    xp: Experiment, names: Sequence[str], *, batch_size: int, data_dir: str | None = None, max_new_tokens: int = 10
) -> pd.DataFrame:
    """Greedy accuracy (`max_new_tokens`, the task's matcher) on the held-out examples of each task,
    instructed first for every task (the selection criterion), then without instruction. Each result
    is appended to `<out>/task_selection_long.csv` at once (a rerun skips what it holds); the table
    per task (`task_selection.csv`, best instructed accuracy first) and its Markdown form
    (`task_selection.md`) are written with the run's outputs. Returns the table."""
    path = xp.out / SELECTION_LOG
    for instructed in (True, False):
        for name in names:
            done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["task", "instructed"])
            if ((done.task == name) & (done.instructed == instructed)).any():
                continue
            task = load_task(name, data_dir)
            start = time.perf_counter()
            acc = accuracy(xp.model, task, instructed=instructed, max_new_tokens=max_new_tokens, batch_size=batch_size)
            seconds = time.perf_counter() - start
            row = {
                "task": name,
                "instructed": instructed,
                "accuracy": acc,
                "n_examples": len(task.eval_pairs),
                "matcher": task.matcher,
                "seconds": round(seconds, 1),
            }
            log = pd.concat([done, pd.DataFrame([row])], ignore_index=True) if len(done) else pd.DataFrame([row])
            atomic_write(path, lambda tmp, log=log: log.to_csv(tmp, index=False))
            print(f"{name:28s} instructed={instructed!s:5s} acc={acc:.2f} ({seconds:.0f} s)", flush=True)
    table = selection_table(pd.read_csv(path))
    _full(xp, table, "task_selection")
    xp.text(selection_markdown(table), "task_selection.md")
    return table


def selection_table(long: pd.DataFrame) -> pd.DataFrame:
    """The task-selection scan (one row per task and setting) as one row per task: instructed and
    uninstructed accuracy, n_examples, scan_seconds (both settings), best instructed accuracy first."""
    long = long.drop_duplicates(["task", "instructed"])
    table = pd.DataFrame(long.pivot_table(index="task", columns="instructed", values="accuracy"))
    table = table.rename(columns={True: "instructed", False: "uninstructed"})
    table = table.join(long.groupby("task")[["n_examples"]].first())
    seconds = pd.DataFrame(long.groupby("task")[["seconds"]].sum())
    table = table.join(seconds.rename(columns={"seconds": "scan_seconds"}))
    return table.sort_values(["instructed", "uninstructed"], ascending=False).reset_index()


def selection_markdown(table: pd.DataFrame) -> str:
    """`selection_table` as a Markdown table (tasks scanned in both settings)."""
    lines = ["| task | instructed | uninstructed | n |", "|---|---:|---:|---:|"]
    lines += [
        f"| {r['task']} | {r['instructed']:.2f} | {r['uninstructed']:.2f} | {int(r['n_examples'])} |"
        for r in table.to_dict("records")
        if pd.notna(r["instructed"]) and pd.notna(r["uninstructed"])
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- train
def train_stored_masks(
    xp: Experiment, tasks: Sequence[Task], config: TrainConfig, runs: str | Path
) -> dict[str, TrainResult]:
    """Train one mask per task in one pass (`train_masks`, resumable from its run folder
    `<runs>/seed<k>-<tasks>`, checkpoints there) and keep only the final masks and their histories
    in `<out>/masks/` (`stored_mask_path(..., seed=config.seed)`). The results by task name."""
    names = [t.name for t in tasks]
    run_dir = Path(runs) / f"seed{config.seed}-{'+'.join(safe_name(n) for n in names)}"
    what = f"seed {config.seed}, {config.steps} steps x batch {config.batch_size}: {' '.join(names)}"
    with timed(xp.out, "train", what):
        results = train_masks(xp.model, tasks, config, out_dir=run_dir)
    for name, result in results.items():
        stem = stored_mask_path("masks", name, seed=config.seed).with_suffix("")
        result.mask.save(xp.staged(f"{stem}.safetensors"))
        _full(xp, result.history, f"{stem}_history")
        print(f"{name}: {result.mask.n_kept} heads kept of {result.mask.values.numel()}", flush=True)
    return results


# ---------------------------------------------------------------------------------------------- stored masks
def seed0_tasks(xp: Experiment) -> list[str]:
    """Tasks with a stored seed-0 mask, in the order of the task-selection table. Other masks in the
    folder (`<task>_seed<k>`, and the variants other scripts read: `_negative`, `_query`, `_mlp`) are
    not seed-0 masks of the paper's recipe."""
    masks = {p.stem: HeadMask.load(p).metadata.get("task", p.stem) for p in xp.files("masks/*.safetensors")}
    names = sorted({task for stem, task in masks.items() if stem == safe_name(task)})
    selection = xp.current("task_selection.csv")
    ranked = list(pd.read_csv(selection).task) if selection.exists() else []
    return sorted(names, key=lambda n: (ranked.index(n) if n in ranked else len(ranked), n))


def seed_masks(xp: Experiment) -> dict[str, HeadMask]:
    """Stored masks of seeds other than 0, labelled "<task file stem> (seed k)"."""
    found = {}
    for path in xp.files("masks/*_seed*.safetensors"):
        stem, seed = path.stem.rsplit("_seed", 1)
        found[f"{stem} (seed {seed})"] = HeadMask.load(path, xp.model)
    return found


def _seed_of(label: str, stem: str) -> str | None:
    """ "seed k" when `label` (`seed_masks`) is a mask of the task with file stem `stem`, else None."""
    return label[len(stem) + 2 : -1] if label.startswith(f"{stem} (seed ") else None


def _write_pair(xp: Experiment, stem: str, table: pd.DataFrame, texts: pd.DataFrame) -> None:
    _full(xp, table, f"tables12_evaluation_{stem}")
    _full(xp, texts, f"tables12_generations_{stem}")


# ---------------------------------------------------------------------------------------------- settings tables
def settings_table(
    xp: Experiment,
    task: Task,
    mask: HeadMask,
    seeds: Mapping[str, HeadMask],
    *,
    alpha: float,
    batch_size: int,
    stage: str,
) -> pd.DataFrame:
    """Tables 1/2 for one task: the paper's settings and the controls `evaluate` adds (no base-model
    twin: no "other model's mask"), plus the masked / random-mask rows of each other seed's mask in
    `seeds` (`seed_masks`), named "masked, seed k". Writes `tables12_evaluation_<task>.csv` and every
    output behind it, `tables12_generations_<task>.csv`; returns the table."""
    stem = safe_name(task.name)
    config = EvalConfig(alpha=alpha, batch_size=batch_size, random_seed=0)
    with timed(xp.out, stage, f"{task.name}: evaluate (settings table)"):
        result = evaluate(xp.model, task, mask, config)
    tables, generations = [result.table], [result.generations]
    for label, seed_mask in seeds.items():  # other seeds of this task's mask: run-to-run spread
        seed = _seed_of(label, stem)
        if seed is None:
            continue
        with timed(xp.out, stage, f"{label}: evaluate (masked, random mask)"):
            seed_result = evaluate(xp.model, task, seed_mask, config)
        rows, texts = seed_result.table, seed_result.generations
        keep = ["masked", "random mask"]
        tables.append(rows[rows.setting.isin(keep)].assign(setting=lambda t: t.setting + f", {seed}"))
        generations.append(texts[texts.setting.isin(keep)].assign(setting=lambda t: t.setting + f", {seed}"))
    table = pd.concat(tables)
    _write_pair(xp, stem, table, pd.concat(generations))
    return table


def fewshot_table(
    xp: Experiment, task: Task, mask: HeadMask, *, shots: int, alpha: float, batch_size: int
) -> pd.DataFrame:
    """The few-shot baseline of Table 3 for one task: `evaluate` on its `shots`-shot prompts
    (`hl.data.fewshot`: the same demonstrations before every held-out input, which are unchanged)
    with the task's stored mask, trained without demonstrations. Rows: original (the few-shot
    baseline: demonstrations, no instruction, no mask), instructed (the instruction after the
    demonstrations), masked, random mask, instructed + scaled mask and the controls. Writes
    `fewshot_evaluation_<task>.csv` and every output, `fewshot_generations_<task>.csv`."""
    stem = safe_name(task.name)
    config = EvalConfig(alpha=alpha, batch_size=batch_size, random_seed=0)
    # the zero-shot mask on k-shot prompts
    with timed(xp.out, "fewshot", f"{task.name}: evaluate {shots}-shot"), mask_on_another_task():
        # dev=0: nothing trains here, so no rows are kept out for a dev set (a task with fewer than
        # k + 100 training pairs still gets the reference's demonstrations: the shuffle's first k)
        result = evaluate(xp.model, fewshot(task, k=shots, dev=0), mask, config)
    table = result.table.assign(task=task.name, shots=shots)
    _full(xp, table, f"fewshot_evaluation_{stem}")
    _full(xp, result.generations.assign(task=task.name, shots=shots), f"fewshot_generations_{stem}")
    return table


def add_seed_rows(xp: Experiment, task: Task, seeds: Mapping[str, HeadMask], *, alpha: float, batch_size: int) -> bool:
    """Masked / random-mask rows of a seed mask stored after the task's table was written, inserted
    before its controls in its table and appended to its generations (the reference rows are not
    rerun: greedy decoding repeats them), their McNemar p-values computed against the stored
    reference rows (`rescore`). True if any row was added."""
    stem = safe_name(task.name)
    table = pd.read_csv(xp.current(f"tables12_evaluation_{stem}.csv"))
    texts = pd.read_csv(xp.current(f"tables12_generations_{stem}.csv"), keep_default_na=False, dtype=TEXT_COLUMNS)
    added = False
    for label, seed_mask in seeds.items():
        seed = _seed_of(label, stem)
        if seed is None or f"masked, {seed}" in set(table.setting):
            continue
        config = EvalConfig(alpha=alpha, batch_size=batch_size, settings=("masked", "random mask"))
        with timed(xp.out, "evaluate", f"{label}: evaluate (masked, random mask)"):
            seed_result = evaluate(xp.model, task, seed_mask, config)
        rows, outputs = seed_result.table, seed_result.generations
        rename = {"masked": f"masked, {seed}", "random mask": f"random mask, {seed}"}
        controls = list(table.index[table.setting.isin(["echo baseline", "majority label"])])
        at = min(controls) if controls else len(table)  # the controls stay last
        new = rows.assign(setting=rows.setting.map(rename))[list(table.columns.intersection(rows.columns))]
        table = pd.DataFrame(pd.concat([table.iloc[:at], new, table.iloc[at:]], ignore_index=True))
        texts = pd.concat([texts, outputs.assign(setting=outputs.setting.map(rename))], ignore_index=True)
        added = True
    if added:
        rescored = rescore(task, table, texts)
        _write_pair(xp, stem, rescored.table, rescored.generations)
    return added


def rescore_stored(xp: Experiment, data_dir: str | None = None) -> list[Path]:
    """Every stored generations table of the model's folder (and of the folders below it: the runs on the
    paper's schedule) scored again by the current metrics, with every table of scores read from them
    (`rescore_folder`), written back with the run's outputs when it ends; the files rescored."""

    def write(path: Path, frame: pd.DataFrame) -> None:
        name = path.relative_to(xp.out).as_posix()
        how = {"method": "gzip", "mtime": 0} if name.endswith(".gz") else None
        atomic_write(xp.staged(name), lambda tmp: frame.to_csv(tmp, index=False, compression=how))

    written = rescore_folder(xp.out, data_dir, write=write)
    print(f"rescored {len(written)} tables", flush=True)
    return written


# ---------------------------------------------------------------------------------------------- analyses
def analyze_task(xp: Experiment, task: Task, mask: HeadMask, *, new_tokens: int, batch_size: int, title: str) -> None:
    """The per-task analyses of a stored mask, each file `<artifact>_<task>`: removal sweeps in weight
    and random order on the first held-out input, its answer as the target token (Fig. 2: ranks,
    generations, summary), layer similarity to the instructed run over `N_SIMILARITY` held-out inputs
    (Fig. 4), the logit lens of the masked, uninstructed prompt (Table 41) and the instructed answer
    loss against alpha (Fig. 6). `title` starts every figure's title (e.g. the model's name)."""
    model, name, stem = xp.model, task.name, safe_name(task.name)
    x, answer = task.eval_pairs[0]
    prompt = task.user_text(x)
    n_heads = model.cfg.n_layers * model.cfg.n_heads
    sweeps = []
    for order_name, order in (("weight", weight_order(mask)), ("random", random_order(model, seed=0))):
        with timed(xp.out, "analyze", f"{name}: removal sweep, {order_name} order"):
            sweep = removal_sweep(model, prompt, order, target_tokens=[answer], max_new_tokens=new_tokens)
        _full(xp, sweep.long(), f"fig2_removal_ranks_{order_name}_{stem}")
        _full(
            xp,
            pd.DataFrame({"step": sweep.steps, "generation": sweep.generations}),
            f"fig2_generations_{order_name}_{stem}",
        )
        sweeps.append(
            {
                "task": name,
                "order": order_name,
                "input": x,
                "answer": answer,
                "target_switch_step": sweep.switch_step,
                "first_change_step": sweep.change_step,
                "heads_in_mask": mask.n_kept,
                "removed_by_mask": n_heads - mask.n_kept,
                "generation_at_mask": sweep.generations[n_heads - mask.n_kept] if order_name == "weight" else None,
            }
        )
        figure = rank_figure(sweep, title=f"{title}, {name}: removal in {order_name} order, input {x!r}")
        xp.figure(figure, f"fig2_removal_ranks_{order_name}_{stem}")
    _full(xp, pd.DataFrame(sweeps), f"fig2_summary_{stem}")

    pairs = {
        "original vs instructed": lambda u, i: (Setting(u), Setting(i)),
        "masked vs instructed": lambda u, i: (Setting(u, mask=mask), Setting(i)),
        "masked vs masked + instructed": lambda u, i: (Setting(u, mask=mask), Setting(i, mask=mask)),
    }
    similarity, rows = {}, []
    with timed(xp.out, "analyze", f"{name}: layer similarity"):  # Fig. 4: mean over held-out inputs
        for label, make in pairs.items():
            per_input = [
                layer_similarity(model, *make(task.user_text(xi), task.user_text(xi, instructed=True)))
                for xi, _ in task.eval_pairs[:N_SIMILARITY]
            ]
            similarity[label] = pd.concat(per_input).groupby(level=0).mean(numeric_only=True)
            rows += [t.assign(comparison=label, example=k) for k, t in enumerate(per_input)]
        _full(xp, pd.concat(rows), f"fig4_similarity_{stem}")
        heading = f"{title}, {name}: cosine similarity to the instructed run (mean of {N_SIMILARITY} inputs)"
        xp.figure(similarity_figure(similarity, title=heading), f"fig4_similarity_{stem}")

    with timed(xp.out, "analyze", f"{name}: logit lens"):  # Table 41: the masked, uninstructed prompt
        lens = logit_lens(model, prompt, k=5, mask=mask)
        _full(xp, lens.table, f"table41_logit_lens_{stem}")
        figure = logit_lens_figure(lens, title=f"{title}, {name}: logit lens, masked, input {x!r}")
        xp.figure(figure, f"table41_logit_lens_{stem}")

    with timed(xp.out, "analyze", f"{name}: alpha grid"):  # Fig. 6: heads outside the mask scaled by alpha
        grid = alpha_grid(model, task, mask, batch_size=batch_size)
        _full(xp, grid.assign(task=name), f"fig6_alpha_grid_{stem}")
        figure = alpha_figure(grid, title=f"{title}, {name}: instructed answer loss vs alpha")
        xp.figure(figure, f"fig6_alpha_grid_{stem}")


def combine_tables(xp: Experiment, *, title: str) -> pd.DataFrame:
    """The combined tables over every analysed task (`tables12_evaluation`, `fig2_summary`,
    `fig6_alpha_grid`; `combine_fewshot`), Table 5 (Jaccard vs the random expectation) and the mask heat map over every
    stored mask, and `tables12_summary.md` (`summary_markdown`); reads the per-task files only.
    Returns the combined settings table."""
    stored = seed0_tasks(xp)
    names = [n for n in stored if xp.current(f"tables12_evaluation_{safe_name(n)}.csv").exists()]
    if not names:
        raise ValueError(f"no settings table of a stored mask in {xp.out}; run the analyze or evaluate stage first")
    for artifact in ("tables12_evaluation", "fig2_summary", "fig6_alpha_grid"):
        parts = [xp.current(f"{artifact}_{safe_name(n)}.csv") for n in names]
        if any(p.exists() for p in parts):  # a task only evaluated (the evaluate stage) has no sweeps
            _full(xp, pd.concat([read_table(p) for p in parts if p.exists()]), artifact)
    combine_fewshot(xp)
    every = {n: HeadMask.load(xp.current(f"masks/{safe_name(n)}.safetensors"), xp.model) for n in stored}
    every |= seed_masks(xp)
    table5 = jaccard_table(every)
    _full(xp, table5, "table5_jaccard")
    heading = f"{title}: Jaccard similarity of the learned masks (p: exact overlap test)"
    xp.figure(jaccard_figure(jaccard_matrix(every), table=table5, title=heading), "table5_jaccard")
    xp.figure(mask_heatmap(every, title=f"{title}: learned masks (1 = kept)"), "masks")
    summary = pd.read_csv(xp.current("tables12_evaluation.csv"))
    xp.text(summary_markdown(summary), "tables12_summary.md")
    return summary


def combine_fewshot(xp: Experiment) -> None:
    """`fewshot_evaluation.csv`: the few-shot rows (`fewshot_table`) of every task with a stored
    seed-0 mask, in the task-selection order; nothing when no task has them."""
    parts = [xp.current(f"fewshot_evaluation_{safe_name(n)}.csv") for n in seed0_tasks(xp)]
    if any(p.exists() for p in parts):
        _full(xp, pd.concat([read_table(p) for p in parts if p.exists()]), "fewshot_evaluation")


def summary_markdown(table: pd.DataFrame) -> str:
    """Two Markdown tables from a combined settings table: accuracy by the paper's matcher / the strict
    one per setting (`SUMMARY_SETTINGS`), then the masked and instructed rows with 95% Wilson
    intervals, echo and empty counts, McNemar p-values and (label tasks) balanced accuracy. Tasks
    evaluated before these columns existed show "n/a" in the first table and are left out of the second."""

    def pair(row) -> str:
        strict = f"{row.strict:.2f}" if "strict" in row and pd.notna(row.strict) else "n/a"
        return f"{row.accuracy:.2f} / {strict}"

    def ci(row, column: str) -> str:
        if f"{column}_low" not in row or pd.isna(row[f"{column}_low"]):
            return "n/a"
        return f"{row[column]:.2f} [{row[f'{column}_low']:.2f}, {row[f'{column}_high']:.2f}]"

    def num(row, column: str, fmt: str) -> str:
        return format(row[column], fmt) if column in row and pd.notna(row[column]) else "n/a"

    lines = ["| task (n) | " + " | ".join(SUMMARY_SETTINGS) + " |", "|---|" + "---:|" * len(SUMMARY_SETTINGS)]
    detail = [
        "| task | setting | paper matcher [95% CI] | strict [95% CI] | echo | empty | p vs original | "
        "p vs instructed | balanced accuracy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task, rows in table.groupby("task", sort=False):
        rows = rows.set_index("setting")
        cells = [pair(rows.loc[s]) if s in rows.index else "" for s in SUMMARY_SETTINGS]
        lines.append(f"| {task} ({int(rows.n_examples.iloc[0])}) | " + " | ".join(cells) + " |")
        if "strict" not in rows or rows.strict.isna().all():  # evaluated before the second reading existed
            continue
        for setting in [s for s in rows.index if s in ("original", "instructed") or s.startswith("masked")]:
            row = rows.loc[setting]
            detail.append(
                f"| {task} | {setting} | {ci(row, 'accuracy')} | {ci(row, 'strict')} | {num(row, 'echo', '.0f')} "
                f"| {num(row, 'empty', '.0f')} | {num(row, 'p_vs_original', '.2g')} | "
                f"{num(row, 'p_vs_instructed', '.2g')} | {num(row, 'balanced_accuracy', '.2f')} |"
            )
    return "\n".join(lines) + "\n\n" + "\n".join(detail) + "\n"
