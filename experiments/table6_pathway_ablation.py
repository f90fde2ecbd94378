"""Table 6: with negative-init masks for several tasks, remove from the full model the heads used by
all masks, by some, or by none, and measure each task's instructed answer loss against removing as many random
heads. `--group NAME=TASK,TASK,...` adds the heads used by every task of a chosen group (the paper's "en"
group: the heads every English-source translation mask keeps), e.g. `--group en=translation/en-zh,translation/en-fr`."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from headsup_lens.analysis import group_ablation, pathway_heads
from headsup_lens.plots import usage_heatmap
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script


@dataclass(frozen=True)
class Options(MultiTaskOptions):
    """Options of Table 6."""

    n_random: int = 5
    """Random head groups per group size."""
    group: list[str] = field(default_factory=list)
    """NAME=TASK,TASK,...: also remove the heads used by every task of this group (repeatable; the paper's 'en')."""


def run(xp: Experiment, options: Options) -> str:
    chosen = {}  # checked before any mask is trained
    for spec in options.group:
        name, _, members = spec.partition("=")
        chosen[name.strip()] = [m.strip() for m in members.split(",") if m.strip()]
        if not name.strip() or not chosen[name.strip()]:
            raise ValueError(f"--group {spec!r} must be NAME=TASK,TASK,...")
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
            raise ValueError(f"--group {name}: {unknown} are not among --tasks {pathways.names}")
        groups[f"used by all of {name}"] = pathways.used_by_all(members)
    settings = dict(n_random=options.n_random, seed=options.seed, batch_size=options.eval_batch_size)
    table = pd.concat(
        [group_ablation(xp.model, task, groups, **settings).assign(task=task.name) for task in tasks],
        ignore_index=True,
    )
    table = table[["task", "group", "size", "loss", "random_mean", "random_std", "original"]]
    xp.table(table, "table6_pathway_ablation")
    xp.table(pathways.table(), "table6_head_usage")
    xp.figure(usage_heatmap(pathways, title="Table 6 — negative-init masks keeping each head"), "table6_head_usage")
    table_text = table.to_string(index=False, float_format="{:.3f}".format)
    return pd.DataFrame([pathways.summary()]).to_string(index=False) + "\n" + table_text


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
