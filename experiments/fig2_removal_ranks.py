"""Fig. 2: ranks of the full model's top tokens and of the target token while heads are removed one by
one in ascending order of the learned weights sigmoid(M), against a random removal order."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import random_order, removal_sweep, step_or_never, weight_order
from headsup_lens.plots import generation_table, rank_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--example", type=int, default=0, help="index of the held-out example to sweep")
    p.add_argument("--max-new-tokens", type=int, default=None, help="greedy tokens per step (default: the task's)")
    args = p.parse_args(argv)
    xp = setup("fig2", args)
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[args.example]
    options = dict(target_tokens=[y], max_new_tokens=args.max_new_tokens or task.max_new_tokens)
    sweeps = {
        "weight order": removal_sweep(xp.model, x, weight_order(mask), **options),
        "random order": removal_sweep(xp.model, x, random_order(xp.model, seed=args.seed), **options),
    }
    for name, sweep in sweeps.items():
        slug = name.split()[0]
        xp.table(sweep.long(), f"fig2_removal_ranks_{slug}", task)
        xp.table(sweep.changes(), f"fig2_generations_{slug}", task)
        xp.figure(
            rank_figure(sweep, title=f"Fig. 2 — {task.name}, input {x!r}, target {y!r}: {name}"),
            f"fig2_removal_ranks_{slug}",
            task,
        )
    xp.figure(
        generation_table(sweeps["weight order"], title=f"Fig. 2 — continuations (weight order), {task.name}"),
        "fig2_generations",
        task,
    )
    summary = pd.DataFrame(
        [
            {
                "task": task.name,
                "order": name,
                "input": x,
                "target": y,
                "heads removed by mask": mask.n_total - mask.n_kept,
                "switch step (target top-1)": step_or_never(sweep.switch_step),
                "first change": step_or_never(sweep.change_step),
            }
            for name, sweep in sweeps.items()
        ]
    )
    xp.table(summary, "fig2_summary", task)
    xp.done(summary)


if __name__ == "__main__":
    main()
