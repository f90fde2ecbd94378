"""Fig. 5: along the weight-order removal sweep, each layer's similarity to the instructed run
(attention output and block output at the last input position)."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import Setting, layer_states, removal_sweep, sweep_similarity, weight_order
from headsup_lens.plots import sweep_similarity_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--example", type=int, default=0, help="index of the held-out example to sweep")
    args = p.parse_args(argv)
    xp = setup("fig5", args)
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[args.example]
    sweep = removal_sweep(xp.model, x, weight_order(mask), target_tokens=[y], max_new_tokens=0, record_layers=True)
    reference = layer_states(xp.model, Setting(task.user_text(x, instructed=True)))
    table = sweep_similarity(sweep, reference)
    xp.table(table, "fig5_sweep_similarity", task)
    for column in ("block_out", "attn_out"):
        xp.figure(
            sweep_similarity_figure(
                table, column, title=f"Fig. 5 — {column} vs the instructed run, {task.name}, input {x!r}"
            ),
            f"fig5_sweep_similarity_{column}",
            task,
        )
    last = table[table.layer == table.layer.max()].set_index("step")
    removed = mask.n_total - mask.n_kept
    steps = {"full model": 0, "switch (target top-1)": sweep.switch_step, "mask size": removed}
    summary = pd.DataFrame(
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
    xp.done(summary)


if __name__ == "__main__":
    main()
