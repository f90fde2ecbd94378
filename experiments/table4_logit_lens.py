"""Tables 4 / 41: logit lens at the last input position, and the paper's three-setting comparison.

For one held-out input: each layer's top tokens (the embedding row first) in three settings, original
(no instruction, no mask), instructed, and masked (no instruction), side by side with whether the
masked run's top token matches the instructed run's at that layer (`analysis.lens_comparison`), and
the full lens of the masked run (residual and attention streams). The final norm is applied before
the unembedding by default; `--no-final-norm` reads the raw residual as the reference notebook.
"""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import Setting, lens_comparison, logit_lens
from headsup_lens.plots import logit_lens_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--example", type=int, default=0, help="index of the held-out example (default: 0)")
    p.add_argument("--k", type=int, default=5, help="top tokens per layer (default: 5)")
    p.add_argument("--no-final-norm", action="store_true", help="unembed the raw residual (the reference notebook)")
    args = p.parse_args(argv)
    xp = setup("table4", args)
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[args.example]
    final_norm = not args.no_final_norm
    suffix = "" if final_norm else "_no_norm"
    settings = {
        "original": Setting(task.user_text(x)),
        "instructed": Setting(task.user_text(x, instructed=True)),
        "masked": Setting(task.user_text(x), mask=mask),
    }
    table = lens_comparison(xp.model, settings, k=args.k, final_norm=final_norm).assign(input=x, answer=y)
    xp.table(table, f"table4_lens_comparison{suffix}", task)
    lens = logit_lens(
        xp.model, task.user_text(x), k=args.k, mask=mask, streams=("embed", "resid", "attn"), final_norm=final_norm
    )
    xp.table(lens.table.assign(input=x, answer=y), f"table41_logit_lens{suffix}", task)
    norm = "final norm" if final_norm else "no final norm"
    xp.figure(
        logit_lens_figure(
            lens, title=f"Table 41 — logit lens, masked, no instruction, {task.name}, input {x!r} ({norm})"
        ),
        f"table41_logit_lens{suffix}",
        task,
    )
    agree = table["masked top1 = instructed"]
    late = table.layer >= table.layer.max() // 2
    summary = pd.DataFrame(
        [
            {
                "task": task.name,
                "input": x,
                "answer": y,
                "final norm": final_norm,
                "layers where masked top-1 = instructed": int(agree.sum()),
                "of layers": len(table),
                "in the upper half": int(agree[late].sum()),
                "original top-1 = instructed": int(table["original top1 = instructed"].sum()),
                "masked top-1 (last layer)": table.masked.iloc[-1].split(" | ")[0],
                "instructed top-1 (last layer)": table.instructed.iloc[-1].split(" | ")[0],
            }
        ]
    )
    xp.table(summary, f"table4_summary{suffix}", task)
    xp.done(summary)


if __name__ == "__main__":
    main()
