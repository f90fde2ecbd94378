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

Rows per task: `reproduce.fewshot_rows`. Each task's rows and generations are kept in `table3_parts/`
as they finish, so a stopped run resumes at the next task, and tasks run in separate invocations with
the same hybrid mask end up in one table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

import headsup_lens as hl
from headsup_lens.data import fewshot
from headsup_lens.organism import TASK_NAMES
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script
from headsup_lens.reproduce._fewshot import (
    fewshot_hybrid_task,
    fewshot_rows,
    fewshot_summary,
    fewshot_task_names,
    load_parts,
    part_stem,
    rows_key,
    save_part,
)
from headsup_lens.reproduce._options import DEFAULT_ORGANISM_TASKS


@dataclass(frozen=True)
class Options(MultiTaskOptions):
    """Options of Table 3."""

    shots: int = 5
    """Demonstrations per prompt (the paper's 5)."""
    hybrid_tasks: list[str] | None = None
    """Tasks whose few-shot variants form the hybrid mixture (default: the shared fewshot/hybrid.json; on the organism its tasks outside --tasks)."""
    alpha: float = 0.25
    """Scale of the heads outside the mask, instructed setting."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    names = options.tasks or (
        list(DEFAULT_ORGANISM_TASKS) if xp.organism_like else fewshot_task_names(options.data_dir)
    )
    mixture = options.hybrid_tasks
    if mixture is None and xp.organism_like:  # the organism: its other tasks, so every evaluated task is unseen
        mixture = [f"organism/{n}" for n in TASK_NAMES if f"organism/{n}" not in names]
    zero = [hl.load_task(n, options.data_dir) for n in names]
    five = [fewshot(t, k=options.shots) for t in zero]
    hybrid, seen = fewshot_hybrid_task(zero, mixture, shots=options.shots, data_dir=options.data_dir)
    with xp.timed(f"masks: {', '.join(t.name for t in [*five, hybrid])}"):
        trained = xp.masks([*five, hybrid])  # one pass: each batch row carries its own task's mask
    hybrid_mask, parts = trained[hybrid.name].mask, xp.out / "table3_parts"
    # Rows of one hybrid mask (and options) share this key, so tasks run in separate invocations combine.
    shared = rows_key(xp.model, [hybrid_mask], [options.shots, options.alpha, options.seed])
    settings = dict(shots=options.shots, alpha=options.alpha, seed=options.seed, batch_size=options.eval_batch_size)
    for task0, task5 in zip(zero, five):
        mask = trained[task5.name].mask
        stem = part_stem(task0, rows_key(xp.model, [mask]), shared)
        if (parts / f"{stem}.csv").is_file():
            print(f"[table3] {task0.name}: rows found in {parts / stem}.csv")
            continue
        with xp.timed(f"{task0.name}: evaluate 0-shot and {options.shots}-shot"):
            rows = fewshot_rows(
                xp.model, task0, task5, mask, hybrid_mask, hybrid_name=hybrid.name, seen=seen[task0.name], **settings
            )
        save_part(parts, stem, *rows)
    table, generations = load_parts(parts, shared, [t.name for t in zero])  # with earlier invocations' tasks
    xp.table(table, "table3_fewshot")
    xp.table(generations, "table3_generations")
    summary = fewshot_summary(table, hybrid=hybrid_mask, hybrid_name=hybrid.name)
    xp.table(summary, "table3_summary")
    prompts = ["0-shot original", *(f"{options.shots}-shot {s}" for s in ("original", "masked", "hybrid mask"))]
    return summary[["task", "seen_by_hybrid", *(f"{p} (accuracy)" for p in prompts)]]


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
