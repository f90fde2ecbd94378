"""The schedule curve: accuracy (the paper's matcher and the strict one, with echo counts) and answer
loss (the paper's "PPL", nats) of a training run's mask at chosen steps (default 300, 1 000, 3 000 and
6 250 where a checkpoint exists, plus the latest), on the task's 100 held-out examples, with the
generations behind every accuracy.

    python experiments/schedule_curve.py --model smollm2 --task antonym \\
        --run figures/smollm2/paper_schedule/antonym --update-figures

Without `--run` the script trains (or reuses) the schedule's mask and reads its own run folder.
`--save-masks` also writes the mask of each step read to `<run>/step_masks/step<N>/<task>.safetensors`,
so any script can use it with `--masks <run>/step_masks/step<N>` (e.g. Fig. 4 with a mid-run mask).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from headsup_lens.evaluation import SCHEDULE_STEPS, schedule_curve
from headsup_lens.plots import schedule_curve_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of the schedule curve."""

    run: str | None = None
    """Training run folder (headsup train --out DIR) to read."""
    at: list[int] = field(default_factory=lambda: list(SCHEDULE_STEPS))
    """Steps to read (default: 300 1000 3000 6250; missing ones are skipped)."""
    save_masks: bool = False
    """Write each step's mask to <run>/step_masks/step<N>/."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    run_dir = options.run or xp.mask(task).run_dir
    if run_dir is None:
        raise ValueError("stored masks have no checkpoints; give --run DIR")
    curve = schedule_curve(xp.model, task, run_dir, options.at, batch_size=options.eval_batch_size)
    table = curve.table.assign(task=task.name)
    xp.table(table, "schedule_curve", task)
    xp.table(curve.generations, "schedule_generations", task)
    if options.save_masks:
        curve.save_masks(run_dir, task.name)
    n = int(table.n.iloc[0])
    title = f"schedule curve, {task.name} (n = {n} held-out examples, 95% Wilson intervals)"
    xp.figure(schedule_curve_figure(table, title=title), "schedule_curve", task)
    return table


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
