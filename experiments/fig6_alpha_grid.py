"""Fig. 6: instructed answer loss as the heads outside the learned mask are scaled by alpha (0 = removed, 1 = full)."""

from __future__ import annotations

from dataclasses import dataclass, field

from headsup_lens.analysis import alpha_grid
from headsup_lens.plots import alpha_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 6."""

    alphas: list[float] = field(default_factory=lambda: [i / 10 for i in range(11)])
    """Alpha values (default: 0, 0.1, ..., 1)."""


def run(xp: Experiment, options: Options) -> str:
    task = xp.task()
    mask = xp.mask(task).mask
    table = alpha_grid(xp.model, task, mask, options.alphas, batch_size=options.eval_batch_size)
    xp.table(table, "fig6_alpha_grid", task)
    xp.figure(alpha_figure(table, title=f"Fig. 6 — instructed answer loss vs α, {task.name}"), "fig6_alpha_grid", task)
    best = table.loc[table.loss.idxmin()]
    text = table.assign(task=task.name)[["task", "alpha", "loss"]].to_string(index=False, float_format="{:.3f}".format)
    return f"{text}\nlowest loss {best.loss:.3f} at alpha {best.alpha:.1f}"


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
