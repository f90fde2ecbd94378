"""Table 40 (App. C.3.3): masking FFN (MLP) blocks together with heads. Two masks per task with the same
schedule and seed: heads only (the paper's method) and heads + one slot per layer for the MLP output
(`TrainConfig(mlp=True)`); both evaluated with `evaluate` (answer loss, greedy accuracy, strict scores,
controls). The paper reports that learning FFN slots as well hurts.

The "random mask" row of the heads + FFN mask shuffles its heads and keeps its FFN slots, so it
removes the same FFN blocks and as many heads as the mask. `table40_ffn_blocks.csv` lists, per task,
how many and which FFN blocks the mask removes."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.evaluation import EvalConfig, evaluate
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script

MASKS = {"heads": False, "heads + FFN": True}  # kind -> learns the FFN slots
MASK_FREE = ["original", "instructed", "echo baseline", "majority label"]  # the same for both masks: kept once


@dataclass(frozen=True)
class Options(MultiTaskOptions):
    """Options of Table 40."""

    alpha: float = 0.25
    """Scale of the heads outside the mask, instructed setting."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    tasks = xp.tasks()
    masks = {}
    for kind, mlp in MASKS.items():
        with xp.timed(f"{kind} masks: {', '.join(t.name for t in tasks)}"):
            masks[kind] = {name: trained.mask for name, trained in xp.masks(tasks, mlp=mlp).items()}
    config = EvalConfig(alpha=options.alpha, random_seed=options.seed, batch_size=options.eval_batch_size)
    tables, generations, blocks = [], [], []
    for task in tasks:
        for kind, mlp in MASKS.items():
            mask = masks[kind][task.name]
            with xp.timed(f"{task.name}: evaluate ({kind} mask)"):
                result = evaluate(xp.model, task, mask, config)
            table, texts = result.table, result.generations
            ffn = mask.removed_mlp_layers()
            if mlp:
                table = table[~table.setting.isin(MASK_FREE)]
                texts = texts[texts.setting.isin(set(table.setting))]
            tables.append(table.assign(mask=kind, ffn_removed=len(ffn) if mlp else 0))
            generations.append(texts.assign(mask=kind))
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
    shown = ["task", "mask", "setting", "n_kept", "ffn_removed", "answer_nll", "accuracy", "strict"]
    return table[table.setting.isin(["original", "instructed", "masked", "random mask"])][shown]


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
