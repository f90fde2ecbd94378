"""Fig. 3: every head's weight sigmoid(M) over mask training, and the heads that join and leave the pathway.

As the reference's figure: a negative-init run (N(-3, 0.02), `--init default` for N(4, 0.02) or the
schedule's own init), logits saved every 31 steps (`--checkpoint-every`), the first half of the run
plotted (`--until`). Heads kept at the end are blue, removed red; the heads that crossed 0.5 and came
back (joined the pathway and left it, or left and came back) are drawn bold and counted, both in the
plotted window and over the whole run (`analysis.trajectory_crossings`). `--run DIR` reads an
existing training run folder (`headsup train --out DIR`) instead of training.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import crossing_counts, trajectory_crossings, trajectory_table, weight_trajectories
from headsup_lens.plots import trajectory_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 3."""

    init: str = "negative"
    """Mask init of the run: negative N(-3, 0.02) as the reference's Fig. 3, or default (the schedule's)."""
    run: str | None = None
    """An existing training run folder to read instead of training."""
    until: float = 0.5
    """Fraction of the run to plot (the reference plots the first half)."""
    run_steps: int | None = None
    """Planned steps of the run, for --until (default: its last checkpoint; give it for a run in progress)."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    if options.init not in ("negative", "default"):
        raise ValueError(f"--init must be negative or default, not {options.init!r}")
    if not 0 < options.until <= 1:
        raise ValueError(f"--until must lie in (0, 1], got {options.until}")
    task = xp.task()
    run_dir = options.run or xp.mask(task, negative=options.init == "negative").run_dir
    if run_dir is None:
        raise ValueError("stored masks have no checkpoints; give --run DIR (a training run folder)")
    steps, weights = weight_trajectories(run_dir, task=task.name)
    shown = [i for i, step in enumerate(steps) if step <= options.until * (options.run_steps or steps[-1])] or [0]
    window, whole = trajectory_crossings(weights[shown]), trajectory_crossings(weights)
    xp.table(trajectory_table(steps, weights), "fig3_trajectories", task)
    plotted = window[["layer", "head", "crossings", "kind"]]
    xp.table(whole.merge(plotted, on=["layer", "head"], suffixes=("", "_plotted")), "fig3_crossings", task)
    highlight = list(zip(window.loc[window.came_back, "layer"], window.loc[window.came_back, "head"]))
    first, last = steps[shown[0]], steps[shown[-1]]
    title = (
        f"Fig. 3 — σ(M), {task.name}, {options.init} init, steps {first}–{last}<br>"
        f"<sup>bold: the {len(highlight)} heads that crossed 0.5 and came back</sup>"
    )
    figure = trajectory_figure([steps[i] for i in shown], weights[shown], highlight=highlight, title=title)
    xp.figure(figure, "fig3_trajectories", task)
    spans = (("plotted", window, last, len(shown)), ("whole run", whole, steps[-1], len(steps)))
    summary = pd.DataFrame(
        [
            {"task": task.name, "init": options.init, "span": span, "last step": until, "checkpoints": n}
            | crossing_counts(table)
            for span, table, until, n in spans
        ]
    )
    xp.table(summary, "fig3_summary", task)
    return summary


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
