"""Fig. 9: masks trained from the negative initialisation N(-3, 0.02) (start from few heads and add):
their size, and the weight-order removal sweep, beside the default initialisation."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import removal_sweep, step_or_never, weight_order
from headsup_lens.evaluation import accuracy
from headsup_lens.plots import mask_heatmap, rank_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 9."""

    example: int = 0
    """Index of the held-out example to sweep."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    masks = {"default init": xp.mask(task).mask, "negative init": xp.mask(task, negative=True).mask}
    x, y = task.eval_pairs[options.example]
    rows = []
    for name, mask in masks.items():
        sweep = removal_sweep(xp.model, x, weight_order(mask), target_tokens=[y], max_new_tokens=task.max_new_tokens)
        slug = name.split()[0]
        xp.table(sweep.long(), f"fig9_ranks_{slug}", task)
        title = f"Fig. 9 — {task.name}, {name} mask, input {x!r}, target {y!r}"
        xp.figure(rank_figure(sweep, title=title), f"fig9_ranks_{slug}", task)
        rows.append(
            {
                "task": task.name,
                "init": name,
                "heads kept": mask.n_kept,
                "masked accuracy": accuracy(xp.model, task, mask=mask, batch_size=options.eval_batch_size),
                "switch step (target top-1)": step_or_never(sweep.switch_step),
                "first change": step_or_never(sweep.change_step),
            }
        )
    xp.figure(mask_heatmap(masks, title=f"Fig. 9 — kept heads, {task.name}"), "fig9_masks", task)
    summary = pd.DataFrame(rows)
    xp.table(summary, "fig9_summary", task)
    return summary


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
