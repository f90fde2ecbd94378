"""Tables 4 / 41: logit lens at the last input position, and the paper's three-setting comparison.

For one held-out input: each layer's top tokens (the embedding row first) in three settings, original
(no instruction, no mask), instructed, and masked (no instruction), side by side with whether the
masked run's top token matches the instructed run's at that layer (`analysis.lens_comparison`), and
the full lens of the masked run (residual and attention streams). The final norm is applied before
the unembedding by default; `--no-final-norm` reads the raw residual as the reference notebook.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.analysis import Setting, lens_comparison, logit_lens
from headsup_lens.plots import logit_lens_figure
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Tables 4 / 41."""

    example: int = 0
    """Index of the held-out example."""
    k: int = 5
    """Top tokens per layer."""
    final_norm: bool = True
    """Apply the final norm before the unembedding (--no-final-norm: the raw residual, as the reference notebook)."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[options.example]
    suffix, norm = ("", "final norm") if options.final_norm else ("_no_norm", "no final norm")
    settings = {
        "original": Setting(task.user_text(x)),
        "instructed": Setting(task.user_text(x, instructed=True)),
        "masked": Setting(task.user_text(x), mask=mask),
    }
    table = lens_comparison(xp.model, settings, k=options.k, final_norm=options.final_norm).assign(input=x, answer=y)
    xp.table(table, f"table4_lens_comparison{suffix}", task)
    streams = ("embed", "resid", "attn")
    lens = logit_lens(xp.model, task.user_text(x), options.k, mask, streams=streams, final_norm=options.final_norm)
    xp.table(lens.table.assign(input=x, answer=y), f"table41_logit_lens{suffix}", task)
    title = f"Table 41 — logit lens, masked, no instruction, {task.name}, input {x!r} ({norm})"
    xp.figure(logit_lens_figure(lens, title=title), f"table41_logit_lens{suffix}", task)
    agree = table["masked top1 = instructed"]
    summary = pd.DataFrame(
        [
            {
                "task": task.name,
                "input": x,
                "answer": y,
                "final norm": options.final_norm,
                "layers where masked top-1 = instructed": int(agree.sum()),
                "of layers": len(table),
                "in the upper half": int(agree[table.layer >= table.layer.max() // 2].sum()),
                "original top-1 = instructed": int(table["original top1 = instructed"].sum()),
                "masked top-1 (last layer)": table.masked.iloc[-1].split(" | ")[0],
                "instructed top-1 (last layer)": table.instructed.iloc[-1].split(" | ")[0],
            }
        ]
    )
    xp.table(summary, f"table4_summary{suffix}", task)
    return summary


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
