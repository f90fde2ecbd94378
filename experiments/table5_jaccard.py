"""Table 5: Jaccard similarity of the masks of different tasks against its expectation for random
masks of the same sizes, the exact (hypergeometric) p-value of each pair's overlap under random masks of
those sizes, and the recall of the smaller mask (default and negative initialisation)."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import jaccard_matrix, jaccard_table
from headsup_lens.plots import jaccard_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, multi_task=True)
    p.add_argument("--no-negative", action="store_true", help="skip the negative-initialisation masks")
    args = p.parse_args(argv)
    xp = setup("table5", args)
    tasks = xp.tasks()
    if len(tasks) < 2:
        raise SystemExit("table5: give at least two tasks with --tasks")
    inits = {"default": False} if args.no_negative else {"default": False, "negative": True}
    tables = []
    for init, negative in inits.items():
        masks = {name: t.mask for name, t in xp.masks(tasks, negative=negative).items()}
        tables.append(jaccard_table(masks).assign(init=init))
        xp.figure(
            jaccard_figure(
                jaccard_matrix(masks),
                table=tables[-1],
                title=f"Table 5 — Jaccard of kept heads ({init} init; p: exact overlap test)",
            ),
            f"table5_jaccard_{init}",
        )
    table = pd.concat(tables, ignore_index=True)
    xp.table(table, "table5_jaccard")
    xp.done(table)


if __name__ == "__main__":
    main()
