"""A verdict per claim of the paper, read from a model's result tables (`experiments/smollm2.py verdicts`).

Each claim is judged by one rule on the committed CSVs of one task, stated here and in the
`evidence` column beside the numbers it read, so a results page shows verdicts no one typed:

- **the mask elicits the task** (Tables 1/2: masked ≈ or > instructed, well above the original):
  by the strict matcher, the masked 95% interval lies above the original's and its upper end
  reaches the instructed accuracy;
- **the mask, not the number of heads** (the random-mask control): the random mask's interval lies
  below the masked one; testable only where the mask elicits the task;
- **removal in weight order switches to the target** (Fig. 2, the first held-out input): the answer
  becomes the top next token in weight order and never in random order; testable only where the
  mask elicits the task;
- **the masked run approaches the instructed run** (Fig. 4): at the last layer, the mean cosine of
  the block output to the instructed run is higher for the masked run than for the original;
- **scaling the heads outside the mask lowers the instructed loss** (Fig. 6): the lowest loss of the
  α grid lies at an α below 1 and under the loss at α = 1.

A claim whose table is missing is "not run".
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..training import safe_name

REPRODUCES, DOES_NOT, UNTESTABLE, NOT_RUN = "reproduces", "does not reproduce", "cannot be tested here", "not run"
CLAIMS = {
    "elicits": "A mask learned without instruction makes the model do the task (Tables 1/2)",
    "random": "The mask, not the number of removed heads, does it (random-mask control)",
    "fig2": "Removing heads in order of the mask's weights switches the output to the target (Fig. 2)",
    "fig4": "The masked run's representations approach the instructed run's (Fig. 4)",
    "fig6": "Scaling the heads outside the mask lowers the instructed loss (Fig. 6)",
}


def claim_verdicts(folder: str | os.PathLike, tasks: list[str]) -> pd.DataFrame:
    """One row per task and claim (`CLAIMS`): `task`, `claim` (its key), `statement`, `verdict`
    (reproduces, does not reproduce, cannot be tested here, not run) and `evidence` (the numbers the
    rule read), from the tables `experiments/smollm2.py` writes into `folder`."""
    rows = []
    for task in tasks:
        stem = safe_name(task)
        elicits = _judge(folder, f"tables12_evaluation_{stem}.csv", _elicits)
        found = {
            "elicits": elicits,
            "random": _gated(elicits, _judge(folder, f"tables12_evaluation_{stem}.csv", _random_control)),
            "fig2": _gated(elicits, _judge(folder, f"fig2_summary_{stem}.csv", _fig2)),
            "fig4": _judge(folder, f"fig4_similarity_{stem}.csv", _fig4),
            "fig6": _judge(folder, f"fig6_alpha_grid_{stem}.csv", _fig6),
        }
        for claim, (verdict, evidence) in found.items():
            rows.append(
                {"task": task, "claim": claim, "statement": CLAIMS[claim], "verdict": verdict, "evidence": evidence}
            )
    return pd.DataFrame(rows)


Verdict = tuple[str, str]


def _judge(folder: str | os.PathLike, name: str, rule: Callable[[pd.DataFrame], Verdict]) -> Verdict:
    path = Path(folder) / name
    return rule(pd.read_csv(path)) if path.is_file() else (NOT_RUN, f"no {name}")


def _gated(elicits: Verdict, verdict: Verdict) -> Verdict:
    """A claim about *how* the mask does the task is testable only where it does the task."""
    if elicits[0] == REPRODUCES or verdict[0] == NOT_RUN:
        return verdict
    return UNTESTABLE, "the mask does not elicit the task"


def _strict(table: pd.DataFrame, setting: str) -> pd.Series:
    return table.loc[table.setting == setting].iloc[0]


def _ci(row: pd.Series) -> str:
    return f"{row.strict:.2f} [{row.strict_low:.2f}, {row.strict_high:.2f}]"


def _elicits(table: pd.DataFrame) -> Verdict:
    masked, original, instructed = (_strict(table, s) for s in ("masked", "original", "instructed"))
    above = masked.strict_low > original.strict_high
    reaches = masked.strict_high >= instructed.strict
    evidence = f"strict: masked {_ci(masked)}, original {_ci(original)}, instructed {_ci(instructed)}"
    return (REPRODUCES if above and reaches else DOES_NOT), evidence


def _random_control(table: pd.DataFrame) -> Verdict:
    masked, shuffled = _strict(table, "masked"), _strict(table, "random mask")
    evidence = f"strict: random mask {_ci(shuffled)}, masked {_ci(masked)}"
    return (REPRODUCES if shuffled.strict_high < masked.strict_low else DOES_NOT), evidence


def _fig2(summary: pd.DataFrame) -> Verdict:
    by_order = summary.set_index("order").target_switch_step
    weight, shuffled = (float(by_order.get(order, math.nan)) for order in ("weight", "random"))

    def said(step: float) -> str:
        return "never" if math.isnan(step) else f"after {int(step)} removals"

    evidence = f"answer top-1: weight order {said(weight)}, random order {said(shuffled)}"
    return (REPRODUCES if not math.isnan(weight) and math.isnan(shuffled) else DOES_NOT), evidence


def _fig4(similarity: pd.DataFrame) -> Verdict:
    last = similarity[similarity.layer == similarity.layer.max()]
    mean = last.groupby("comparison").block_out.mean()
    masked, original = mean["masked vs instructed"], mean["original vs instructed"]
    evidence = f"last layer's block output, cosine to the instructed run: masked {masked:.3f}, original {original:.3f}"
    return (REPRODUCES if masked > original else DOES_NOT), evidence


def _fig6(grid: pd.DataFrame) -> Verdict:
    best = grid.loc[grid.loss.idxmin()]
    plain = grid.loc[(grid.alpha - 1.0).abs().idxmin()]
    evidence = f"instructed loss {plain.loss:.3f} at α {plain.alpha:.1f}, lowest {best.loss:.3f} at α {best.alpha:.1f}"
    return (REPRODUCES if best.alpha < 1.0 and best.loss < plain.loss else DOES_NOT), evidence
