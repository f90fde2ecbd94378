"""Fig. 5: along the weight-order removal sweep, each layer's similarity to the instructed run
(attention output and block output at the last input position)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import Setting, layer_states, removal_sweep, sweep_similarity, weight_order
from headsup_lens.plots import sweep_similarity_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 5."""

    example: int = 0
    """Index of the held-out example to sweep."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[options.example]
    sweep = removal_sweep(xp.model, x, weight_order(mask), target_tokens=[y], max_new_tokens=0, record_layers=True)
    table = sweep_similarity(sweep, layer_states(xp.model, Setting(task.user_text(x, instructed=True))))
    xp.table(table, "fig5_sweep_similarity", task)
    for column in ("block_out", "attn_out"):
        title = f"Fig. 5 — {column} vs the instructed run, {task.name}, input {x!r}"
        xp.figure(sweep_similarity_figure(table, column, title=title), f"fig5_sweep_similarity_{column}", task)
    last = table[table.layer == table.layer.max()].set_index("step")
    steps = {"full model": 0, "switch (target top-1)": sweep.switch_step, "mask size": mask.n_total - mask.n_kept}
    return pd.DataFrame(
        [
            {
                "point": name,
                "step": step,
                "block_out (last layer)": last.block_out.get(step),
                "attn_out (last layer)": last.attn_out.get(step),
            }
            for name, step in steps.items()
            if step is not None
        ]
    )


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
