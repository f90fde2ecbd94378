"""Fig. 8 (App. C.3.1): re-order the first k heads of the weight-order sweep by how much each removal
raised the target token, sweep again, and compare where the switch to the task happens."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import influence_order, random_order, removal_sweep, step_or_never, weight_order
from headsup_lens.plots import rank_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 8."""

    example: int = 0
    """Index of the held-out example to sweep."""
    k: int | None = None
    """Heads to re-order (default: twice the heads the mask removes; the paper: 320 of 1024)."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[options.example]
    k = options.k or min(mask.n_total, max(1, 2 * (mask.n_total - mask.n_kept)))
    settings = dict(target_tokens=[y], max_new_tokens=task.max_new_tokens)
    weight = removal_sweep(xp.model, x, weight_order(mask), **settings)
    sweeps = {
        "weight order": weight,
        "influence order": removal_sweep(xp.model, x, influence_order(weight, k=k), **settings),
        "random order": removal_sweep(xp.model, x, random_order(xp.model, seed=options.seed), **settings),
    }
    for name, sweep in sweeps.items():
        slug = name.split()[0]
        xp.table(sweep.long(), f"fig8_ranks_{slug}", task)
        title = f"Fig. 8 — {task.name}, input {x!r}, target {y!r}: {name}"
        xp.figure(rank_figure(sweep, title=title), f"fig8_ranks_{slug}", task)
    summary = pd.DataFrame(
        [
            {
                "task": task.name,
                "order": name,
                "k": k,
                "switch step (target top-1)": step_or_never(s.switch_step),
                "first change": step_or_never(s.change_step),
            }
            for name, s in sweeps.items()
        ]
    )
    xp.table(summary, "fig8_summary", task)
    return summary


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
