"""Fig. 4: cosine similarity per layer, at the last input position, of the attention output and the
block output: original vs instructed, masked vs instructed, masked vs masked + instructed."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import Setting, layer_similarity
from headsup_lens.plots import similarity_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--examples", type=int, default=20, help="held-out examples to average over")
    args = p.parse_args(argv)
    xp = setup("fig4", args)
    task = xp.task()
    mask = xp.mask(task).mask.values
    rows = []
    for x, _ in task.eval_pairs[: args.examples]:
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
    tables = dict(mean.groupby("comparison", sort=False))
    xp.figure(
        similarity_figure(
            tables,
            title=f"Fig. 4 — similarity at the last input position, {task.name} "
            f"(mean of {len(table.input.unique())} inputs)",
        ),
        "fig4_similarity",
        task,
    )
    last = mean[mean.layer == mean.layer.max()].drop(columns="layer")
    xp.done(last.rename(columns={"attn_out": "attn_out (last layer)", "block_out": "block_out (last layer)"}))


if __name__ == "__main__":
    main()
