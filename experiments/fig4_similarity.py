"""Fig. 4: cosine similarity per layer, at the last input position, of the attention output and the
block output: original vs instructed, masked vs instructed, masked vs masked + instructed."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import Setting, layer_similarity
from headsup_lens.plots import similarity_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Fig. 4."""

    examples: int = 20
    """Held-out examples to average over."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    mask = xp.mask(task).mask.values
    rows = []
    for x, _ in task.eval_pairs[: options.examples]:
        instructed = task.user_text(x, instructed=True)
        comparisons = {
            "original vs instructed": (Setting(x), Setting(instructed)),
            "masked vs instructed": (Setting(x, mask=mask), Setting(instructed)),
            "masked vs masked + instructed": (Setting(x, mask=mask), Setting(instructed, mask=mask)),
        }
        for name, (a, b) in comparisons.items():
            rows.append(layer_similarity(xp.model, a, b).assign(comparison=name, input=x))
    table = pd.concat(rows, ignore_index=True)
    mean = table.groupby(["comparison", "layer"], sort=False)[["attn_out", "block_out"]].mean().reset_index()
    xp.table(table, "fig4_similarity", task)
    title = f"Fig. 4 — similarity at the last input position, {task.name} (mean of {table.input.nunique()} inputs)"
    tables = dict(iter(mean.groupby("comparison", sort=False)))  # dict(groupby) would call its .keys, a str
    xp.figure(similarity_figure(tables, title=title), "fig4_similarity", task)
    last = mean[mean.layer == mean.layer.max()].drop(columns="layer")
    return last.rename(columns={"attn_out": "attn_out (last layer)", "block_out": "block_out (last layer)"})


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
