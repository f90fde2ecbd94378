"""Table 6: with negative-init masks for several tasks, remove from the full model the heads used by
all masks, by some, or by none, and measure each task's instructed answer loss against removing as many random
heads. `--group NAME=TASK,TASK,...` adds the heads used by every task of a chosen group (the paper's "en"
group: the heads every English-source translation mask keeps), e.g. `--group en=translation/en-zh,translation/en-fr`."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import group_ablation, pathway_heads
from headsup_lens.plots import usage_heatmap


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, multi_task=True)
    p.add_argument("--n-random", type=int, default=5, help="random head groups per group size (default: 5)")
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=TASK,TASK,...",
        help="also remove the heads used by every task of this group (repeatable; the paper's 'en')",
    )
    args = p.parse_args(argv)
    chosen = {}
    for spec in args.group:
        name, _, members = spec.partition("=")
        chosen[name.strip()] = [m.strip() for m in members.split(",") if m.strip()]
        if not name.strip() or not chosen[name.strip()]:
            raise SystemExit(f"table6: --group {spec!r} must be NAME=TASK,TASK,...")
    xp = setup("table6", args)
    tasks = xp.tasks()
    masks = {name: t.mask for name, t in xp.masks(tasks, negative=True).items()}
    pathways = pathway_heads(masks)
    groups = {
        "used by all": pathways.used_by_all(),
        "used by some": pathways.used_by_some(),
        "used by none": pathways.used_by_none(),
    }
    for name, members in chosen.items():
        unknown = [m for m in members if m not in pathways.names]
        if unknown:
            raise SystemExit(f"table6: --group {name}: {unknown} are not among --tasks {pathways.names}")
        groups[f"used by all of {name}"] = pathways.used_by_all(members)
    table = pd.concat(
        [
            group_ablation(
                xp.model, task, groups, n_random=args.n_random, seed=args.seed, batch_size=args.eval_batch_size
            ).assign(task=task.name)
            for task in tasks
        ],
        ignore_index=True,
    )
    table = table[["task", "group", "size", "loss", "random_mean", "random_std", "original"]]
    xp.table(table, "table6_pathway_ablation")
    xp.table(pathways.table(), "table6_head_usage")
    xp.figure(usage_heatmap(pathways, title="Table 6 — negative-init masks keeping each head"), "table6_head_usage")
    xp.done(
        pd.DataFrame([pathways.summary()]).to_string(index=False)
        + "\n"
        + table.to_string(index=False, float_format=lambda v: f"{v:.3f}")
    )


if __name__ == "__main__":
    main()
