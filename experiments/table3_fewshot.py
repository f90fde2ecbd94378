"""Table 3: few-shot masks. For every task, a mask trained on 5-shot prompts without instruction (the
reference's demonstrations: the first 5 training pairs after a seeded shuffle, removed from training
with 100 more, `hl.data.fewshot`), and one *hybrid* mask trained on a mixture of 5-shot tasks,
evaluated on 5-shot prompts, against the 5-shot (demonstrations, no mask) and zero-shot baselines.
The paper's claim (its rebuttal): the hybrid mask also helps tasks it never saw.

Tasks: `--tasks`, else on the organism its default four, else every task with a few-shot file in the
data directory (`function_vectors/fewshot/*.json`: the paper's six). Hybrid mixture: the shared
`fewshot/hybrid.json` (31 function-vector tasks; never ag_news, conll2003_location, product-company,
sentiment: `hl.data.HYBRID_UNSEEN`), or with `--hybrid-tasks` the 5-shot variants of those tasks
(on the organism by default: its tasks outside `--tasks`, so every evaluated task is unseen).

Rows per task (`evaluate`, so each carries the strict scores, Wilson intervals, echo counts and the
controls): prompt "0-shot": original and instructed (the zero-shot baselines) and the 5-shot mask
without demonstrations; prompt "5-shot": original (the 5-shot baseline), instructed, the task's 5-shot
mask ("masked"), its random shuffle ("random mask", same size), the hybrid mask ("hybrid mask"), the
instructed + scaled mask, and the echo / majority-label controls. Each task's rows and generations
are kept in `table3_parts/` as they finish, so a stopped run resumes at the next task, and tasks run in
separate invocations with the same hybrid mask end up in one table.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from pathlib import Path

import pandas as pd
from _common import ORGANISM_TASKS, parser, record_time, setup

import headsup_lens as hl
from headsup_lens._io import atomic_write
from headsup_lens.data import FV_TASKS, HYBRID_UNSEEN, fewshot, task_mixture
from headsup_lens.evaluation import EvalConfig, evaluate
from headsup_lens.training import safe_name

HYBRID_FILE = "fewshot/hybrid"


def default_tasks(xp) -> list[str]:
    """The organism's default tasks, else every task the data directory has a few-shot file for."""
    if xp._default_tasks():
        return list(ORGANISM_TASKS)
    folder = hl.data.data_dir(xp.args.data_dir) / "function_vectors" / "fewshot"
    names = sorted(p.stem for p in folder.glob("*.json") if p.stem != "hybrid")
    if not names:
        raise SystemExit(f"table3: no few-shot files in {folder}; give --tasks")
    return names


def hybrid_source(xp, tasks: list[str]) -> list[str] | None:
    """The tasks of the hybrid mixture, or None for the shared `fewshot/hybrid.json`."""
    if xp.args.hybrid_tasks:
        return list(xp.args.hybrid_tasks)
    if xp._default_tasks():  # the organism: its other tasks, so every evaluated task is unseen
        from headsup_lens.organism import TASK_NAMES

        return [f"organism/{n}" for n in TASK_NAMES if f"organism/{n}" not in tasks]
    return None


def digest(*masks) -> str:
    """A short key of the masks (and options) a task's rows were computed with: a stale part is redone."""
    h = hashlib.sha256()
    for m in masks:
        h.update(m.values.numpy().tobytes() if hasattr(m, "values") else str(m).encode())
    return h.hexdigest()[:10]


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, multi_task=True)
    p.add_argument("--shots", type=int, default=5, help="demonstrations per prompt (default: 5, the paper's)")
    p.add_argument(
        "--hybrid-tasks",
        nargs="+",
        default=None,
        help="tasks whose few-shot variants form the hybrid mixture (default: the shared "
        "fewshot/hybrid.json; on the organism its tasks outside --tasks)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.25,
        help="scale of the heads outside the mask, instructed setting (default: 0.25)",
    )
    args = p.parse_args(argv)
    xp = setup("table3", args)
    names = args.tasks or default_tasks(xp)
    zero = [hl.load_task(n, args.data_dir) for n in names]
    five = [fewshot(t, k=args.shots) for t in zero]
    mixture = hybrid_source(xp, names)
    if mixture is None:
        hybrid = hl.load_task(HYBRID_FILE, args.data_dir)
        seen = {t.name: t.name in FV_TASKS and t.name not in HYBRID_UNSEEN for t in zero}  # the file's 31 tasks
    else:
        hybrid = task_mixture(
            [fewshot(hl.load_task(n, args.data_dir), k=args.shots) for n in mixture],
            f"fewshot/hybrid_{'+'.join(n.removeprefix('organism/') for n in mixture)}",
        )
        seen = {t.name: t.name in mixture for t in zero}

    started = time.perf_counter()
    trained = xp.masks([*five, hybrid])  # one pass: each batch row carries its own task's mask
    record_time(xp.out, "table3", f"masks: {', '.join(t.name for t in [*five, hybrid])}", time.perf_counter() - started)
    hybrid_mask = trained[hybrid.name].mask

    parts = xp.out / "table3_parts"
    # Rows of one hybrid mask (and options) share this key, so tasks run in separate invocations combine.
    shared = digest(hybrid_mask, args.shots, args.alpha, args.seed)
    for task0, task5 in zip(zero, five):
        mask = trained[task5.name].mask
        stem = parts / f"{safe_name(task0.name)}-{digest(mask)}-{shared}"
        if stem.with_suffix(".csv").is_file():
            print(f"[table3] {task0.name}: rows found in {stem}.csv")
            continue
        config = EvalConfig(alpha=args.alpha, random_seed=args.seed, batch_size=args.eval_batch_size)
        started = time.perf_counter()
        with warnings.catch_warnings():  # the 5-shot mask on zero-shot prompts is intended (column mask_task)
            warnings.filterwarnings("ignore", message="the mask was trained for task")
            result0 = evaluate(xp.model, task0, mask, config)
        table0, gen0 = result0.table, result0.generations
        record_time(xp.out, "table3", f"{task0.name}: evaluate 0-shot", time.perf_counter() - started)
        started = time.perf_counter()
        # The hybrid mask takes evaluate's slot for a second mask (the paper's other model's mask).
        result5 = evaluate(xp.model, task5, mask, config, other_mask=hybrid_mask)
        table5, gen5 = result5.table, result5.generations
        record_time(xp.out, "table3", f"{task0.name}: evaluate {args.shots}-shot", time.perf_counter() - started)
        rename = {"other model's mask": "hybrid mask"}
        table0 = table0.assign(prompt="0-shot")
        table5 = table5.assign(prompt=f"{args.shots}-shot", setting=table5.setting.replace(rename))
        table5.loc[table5.setting == "hybrid mask", "mask_task"] = hybrid.name
        table = pd.concat([table0, table5], ignore_index=True).assign(task=task0.name, seen_by_hybrid=seen[task0.name])
        gens = pd.concat(
            [
                gen0.assign(prompt="0-shot"),
                gen5.assign(prompt=f"{args.shots}-shot", setting=gen5.setting.replace(rename)),
            ],
            ignore_index=True,
        ).assign(task=task0.name)
        table = table[["task", "prompt", *[c for c in table.columns if c not in ("task", "prompt")]]]
        parts.mkdir(parents=True, exist_ok=True)
        atomic_write(Path(f"{stem}_generations.csv"), lambda tmp, g=gens: g.to_csv(tmp, index=False))
        atomic_write(stem.with_suffix(".csv"), lambda tmp, t=table: t.to_csv(tmp, index=False, float_format="%.6g"))

    # Every task evaluated with this hybrid mask, also by earlier invocations (the newest part per task).
    found = sorted(parts.glob(f"*-{shared}.csv"), key=lambda path: path.stat().st_mtime)
    newest = {pd.read_csv(path, usecols=["task"]).task.iloc[0]: path for path in found}
    order = [t.name for t in zero] + sorted(set(newest) - {t.name for t in zero})
    table = pd.concat([pd.read_csv(newest[name]) for name in order], ignore_index=True)
    xp.table(table, "table3_fewshot")
    xp.table(
        pd.concat(
            [pd.read_csv(Path(f"{newest[name].with_suffix('')}_generations.csv")) for name in order], ignore_index=True
        ),
        "table3_generations",
    )
    rows = table[table.setting.isin(["original", "instructed", "masked", "random mask", "hybrid mask"])]
    columns = rows.prompt + " " + rows.setting
    summary = pd.concat(
        {
            metric: rows.assign(column=columns).pivot(index="task", columns="column", values=metric)
            for metric in ("accuracy", "strict")
        },
        axis=1,
    )
    summary.columns = [f"{setting} ({metric})" for metric, setting in summary.columns]
    masked = rows[(rows.prompt == f"{args.shots}-shot") & (rows.setting == "masked")].set_index("task")
    summary = (
        summary.reindex(order)
        .reset_index()
        .assign(
            seen_by_hybrid=lambda s: s.task.map(table.groupby("task").seen_by_hybrid.first()),
            heads_kept_5shot=lambda s: s.task.map(masked.n_kept),
            heads_kept_hybrid=hybrid_mask.n_kept,
            hybrid=hybrid.name,
        )
    )
    xp.table(summary, "table3_summary")
    xp.done(
        summary[
            [
                "task",
                "seen_by_hybrid",
                "0-shot original (accuracy)",
                f"{args.shots}-shot original (accuracy)",
                f"{args.shots}-shot masked (accuracy)",
                f"{args.shots}-shot hybrid mask (accuracy)",
            ]
        ]
    )


if __name__ == "__main__":
    main()
