"""Table 5: Jaccard similarity of the masks of different tasks against its expectation for random
masks of the same sizes, the exact (hypergeometric) p-value of each pair's overlap under random masks of
those sizes, and the recall of the smaller mask (default and negative initialisation)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import jaccard_matrix, jaccard_table
from headsup_lens.plots import jaccard_figure
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script


@dataclass(frozen=True)
class Options(MultiTaskOptions):
    """Options of Table 5."""

    negative: bool = True
    """Also compare the negative-initialisation masks (--no-negative skips them)."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    tasks = xp.tasks()
    if len(tasks) < 2:
        raise ValueError("give at least two tasks with --tasks")
    inits = {"default": False, "negative": True} if options.negative else {"default": False}
    tables = []
    for init, negative in inits.items():
        masks = {name: t.mask for name, t in xp.masks(tasks, negative=negative).items()}
        tables.append(jaccard_table(masks).assign(init=init))
        title = f"Table 5 — Jaccard of kept heads ({init} init; p: exact overlap test)"
        xp.figure(jaccard_figure(jaccard_matrix(masks), table=tables[-1], title=title), f"table5_jaccard_{init}")
    table = pd.concat(tables, ignore_index=True)
    xp.table(table, "table5_jaccard")
    return table


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
