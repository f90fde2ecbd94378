"""Table 40 (App. C.3.3): masking FFN (MLP) blocks together with heads. Two masks per task with the same
schedule and seed: heads only (the paper's method) and heads + one slot per layer for the MLP output
(`TrainConfig(mlp=True)`); both evaluated with `evaluate` (answer loss, greedy accuracy, strict scores,
controls). The paper reports that learning FFN slots as well hurts.

The "random mask" row of the heads + FFN mask shuffles its heads and keeps its FFN slots, so it
removes the same FFN blocks and as many heads as the mask. `table40_ffn_blocks.csv` lists, per task,
how many and which FFN blocks the mask removes."""

from __future__ import annotations

import time

import pandas as pd
from _common import parser, record_time, setup

from headsup_lens.evaluation import EvalConfig, evaluate

MASKS = ("heads", "heads + FFN")


def removed_ffn(mask) -> list[int]:
    """The layers whose MLP output the mask removes (none for a heads-only mask)."""
    if mask.mlp_values is None:
        return []
    return [layer for layer, value in enumerate(mask.mlp_values.tolist()) if value < 0.5]


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, multi_task=True)
    p.add_argument(
        "--alpha",
        type=float,
        default=0.25,
        help="scale of the heads outside the mask, instructed setting (default: 0.25)",
    )
    args = p.parse_args(argv)
    xp = setup("table40", args)
    tasks = xp.tasks()
    masks = {}
    for kind, mlp in zip(MASKS, (False, True)):
        started = time.perf_counter()
        masks[kind] = {name: trained.mask for name, trained in xp.masks(tasks, mlp=mlp).items()}
        record_time(
            xp.out, "table40", f"{kind} masks: {', '.join(t.name for t in tasks)}", time.perf_counter() - started
        )
    tables, generations, blocks = [], [], []
    for task in tasks:
        for kind in MASKS:
            mask = masks[kind][task.name]
            started = time.perf_counter()
            config = EvalConfig(alpha=args.alpha, random_seed=args.seed, batch_size=args.eval_batch_size)
            result = evaluate(xp.model, task, mask, config)
            table, gens = result.table, result.generations
            record_time(xp.out, "table40", f"{task.name}: evaluate ({kind} mask)", time.perf_counter() - started)
            ffn = removed_ffn(mask)
            if kind != MASKS[0]:  # the mask-free rows and controls are the same for both masks: keep one copy
                keep = ~table.setting.isin(["original", "instructed", "echo baseline", "majority label"])
                table, gens = table[keep], gens[gens.setting.isin(set(table.setting))]
            tables.append(table.assign(mask=kind, ffn_removed=len(ffn) if kind != MASKS[0] else 0))
            generations.append(gens.assign(mask=kind))
            blocks.append(
                {
                    "task": task.name,
                    "mask": kind,
                    "heads kept": mask.n_kept,
                    "heads total": mask.n_total,
                    "ffn removed": len(ffn),
                    "ffn layers removed": " ".join(map(str, ffn)),
                    "n_layers": mask.n_layers,
                }
            )
    table = pd.concat(tables, ignore_index=True)
    table.loc[~table.setting.isin(["masked", "random mask", "instructed + scaled mask"]), "mask"] = "-"
    table = table[["task", "mask", *[c for c in table.columns if c not in ("task", "mask")]]]
    xp.table(table, "table40_ffn_mask")
    xp.table(pd.concat(generations, ignore_index=True), "table40_generations")
    xp.table(pd.DataFrame(blocks), "table40_ffn_blocks")
    summary = table[table.setting.isin(["original", "instructed", "masked", "random mask"])][
        ["task", "mask", "setting", "n_kept", "ffn_removed", "answer_nll", "accuracy", "strict"]
    ]
    xp.done(summary)


if __name__ == "__main__":
    main()
