"""Fig. 9: masks trained from the negative initialisation N(-3, 0.02) (start from few heads and add):
their size, and the weight-order removal sweep, beside the default initialisation."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import removal_sweep, step_or_never, weight_order
from headsup_lens.evaluation import accuracy
from headsup_lens.plots import mask_heatmap, rank_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--example", type=int, default=0, help="index of the held-out example to sweep")
    args = p.parse_args(argv)
    xp = setup("fig9", args)
    task = xp.task()
    masks = {"default init": xp.mask(task).mask, "negative init": xp.mask(task, negative=True).mask}
    x, y = task.eval_pairs[args.example]
    rows = []
    for name, mask in masks.items():
        sweep = removal_sweep(xp.model, x, weight_order(mask), target_tokens=[y], max_new_tokens=task.max_new_tokens)
        slug = name.split()[0]
        xp.table(sweep.long(), f"fig9_ranks_{slug}", task)
        xp.figure(
            rank_figure(sweep, title=f"Fig. 9 — {task.name}, {name} mask, input {x!r}, target {y!r}"),
            f"fig9_ranks_{slug}",
            task,
        )
        rows.append(
            {
                "task": task.name,
                "init": name,
                "heads kept": mask.n_kept,
                "masked accuracy": accuracy(xp.model, task, mask=mask, batch_size=args.eval_batch_size),
                "switch step (target top-1)": step_or_never(sweep.switch_step),
                "first change": step_or_never(sweep.change_step),
            }
        )
    xp.figure(mask_heatmap(masks, title=f"Fig. 9 — kept heads, {task.name}"), "fig9_masks", task)
    summary = pd.DataFrame(rows)
    xp.table(summary, "fig9_summary", task)
    xp.done(summary)


if __name__ == "__main__":
    main()
