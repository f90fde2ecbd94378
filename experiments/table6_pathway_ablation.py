"""Table 6: with negative-init masks for several tasks, remove from the full model the heads used by
all masks, or by none, and measure each task's instructed answer loss against removing as many random heads."""

from __future__ import annotations

import pandas as pd

from _common import parser, setup
from headsup_lens.analysis import group_ablation, pathway_heads
from headsup_lens.plots import usage_heatmap


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, multi_task=True)
    p.add_argument("--n-random", type=int, default=5, help="random head groups per group size (default: 5)")
    args = p.parse_args(argv)
    xp = setup("table6", args)
    tasks = xp.tasks()
    masks = {name: t.mask for name, t in xp.masks(tasks, negative=True).items()}
    pathways = pathway_heads(masks)
    groups = {"used by all": pathways.used_by_all(), "used by some": pathways.used_by_some(),
              "used by none": pathways.used_by_none()}
    table = pd.concat([group_ablation(xp.model, task, groups, n_random=args.n_random, seed=args.seed,
                                      batch_size=args.eval_batch_size).assign(task=task.name)
                       for task in tasks], ignore_index=True)
    table = table[["task", "group", "size", "loss", "random_mean", "random_std", "original"]]
    xp.table(table, "table6_pathway_ablation")
    xp.table(pathways.table(), "table6_head_usage")
    xp.figure(usage_heatmap(pathways, title="Table 6 — negative-init masks keeping each head"), "table6_head_usage")
    xp.done(pd.DataFrame([pathways.summary()]).to_string(index=False) + "\n"
            + table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
