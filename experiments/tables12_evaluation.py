"""Tables 1/2: every task in the paper's settings (original, instructed, masked, random mask, instructed +
scaled mask) and the controls (echo baseline, majority label): answer loss (the paper's "PPL", nats/token),
perplexity, greedy accuracy (the paper's matcher and the strict one, Wilson intervals, echo / empty counts,
McNemar p-values), ROUGE-L, BLEU; every output behind the table in tables12_generations.csv.
On the organism, also how well each learned mask recovers the planted pathway S_t."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import pathway_recovery
from headsup_lens.evaluation import EvalConfig, evaluate
from headsup_lens.plots import mask_heatmap
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script


@dataclass(frozen=True)
class Options(MultiTaskOptions):
    """Options of Tables 1/2."""

    alpha: float = 0.25
    """Scale of the heads outside the mask, instructed setting."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    tasks = xp.tasks()
    masks = {name: trained.mask for name, trained in xp.masks(tasks).items()}
    config = EvalConfig(alpha=options.alpha, random_seed=options.seed, batch_size=options.eval_batch_size)
    results = [evaluate(xp.model, t, masks[t.name], config) for t in tasks]
    table = pd.concat([r.table for r in results], ignore_index=True)
    xp.table(table, "tables12_evaluation")
    xp.table(pd.concat([r.generations for r in results], ignore_index=True), "tables12_generations")  # behind every row
    xp.figure(mask_heatmap(masks, title="Learned masks (1 = kept)"), "tables12_masks")
    accuracy = table.pivot(index="task", columns="setting", values="accuracy")
    summary = accuracy.reindex(columns=list(table.setting.unique())).reset_index()
    planted = xp.planted()
    if planted is not None:
        recovery = pd.DataFrame(
            [{"task": name, **pathway_recovery(mask, planted[name])} for name, mask in masks.items() if name in planted]
        )
        xp.table(recovery, "tables12_planted_recovery")
        summary = summary.merge(recovery[["task", "jaccard_vs_planted", "jaccard_random_expectation"]], on="task")
    xp.table(summary, "tables12_summary")
    return summary


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
