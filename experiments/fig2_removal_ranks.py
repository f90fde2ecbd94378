"""Fig. 2: ranks of the full model's top tokens and of the target token while heads are removed one by
one in ascending order of the learned weights sigmoid(M), against a random removal order."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import random_order, removal_sweep, step_or_never, weight_order
from headsup_lens.plots import generation_table, rank_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 2."""

    example: int = 0
    """Index of the held-out example to sweep."""
    max_new_tokens: int | None = None
    """Greedy tokens per step (default: the task's)."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[options.example]
    settings = dict(target_tokens=[y], max_new_tokens=options.max_new_tokens or task.max_new_tokens)
    sweeps = {
        "weight order": removal_sweep(xp.model, x, weight_order(mask), **settings),
        "random order": removal_sweep(xp.model, x, random_order(xp.model, seed=options.seed), **settings),
    }
    for name, sweep in sweeps.items():
        slug = name.split()[0]
        xp.table(sweep.long(), f"fig2_removal_ranks_{slug}", task)
        xp.table(sweep.changes(), f"fig2_generations_{slug}", task)
        title = f"Fig. 2 — {task.name}, input {x!r}, target {y!r}: {name}"
        xp.figure(rank_figure(sweep, title=title), f"fig2_removal_ranks_{slug}", task)
    title = f"Fig. 2 — continuations (weight order), {task.name}"
    xp.figure(generation_table(sweeps["weight order"], title=title), "fig2_generations", task)
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
    return summary


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
