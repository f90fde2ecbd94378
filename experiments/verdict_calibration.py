"""The verdicts' rules calibrated on the organism, where the pathways are planted: every run of the
organism plan's `[calibration]` (`figures/organism/analysis_plan.toml`) judged under that plan.

    python experiments/verdict_calibration.py --update-figures

Planted runs are masks learned on each task; null runs are masks learned on shuffled answers, another
task's planted pathway and fluency-kept random masks (`reproduce._calibration`). Writes
`verdict_calibration.csv` (per kind and claim: runs, how many read "reproduces", the rate and its exact
95% interval; a null rate must stay at most alpha) and `verdict_calibration_runs.csv` (every run)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.evaluation._plan import AnalysisPlan
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script
from headsup_lens.reproduce._calibration import calibration_masks, calibration_table, judge_runs, planted_config
from headsup_lens.reproduce._masks import cached_masks


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of the verdicts' calibration."""

    plan: str = "figures/organism/analysis_plan.toml"
    """The analysis plan judged by (its [calibration] table lists the runs)."""


def run(xp: Experiment, o: Options) -> pd.DataFrame:
    if not xp.is_organism:
        raise ValueError("the calibration needs the organism's planted pathways (--model organism)")
    plan = AnalysisPlan.read(o.plan)
    config = planted_config(plan)

    def train(tasks, seed):
        found = cached_masks(xp.model, tasks, config.replace(seed=seed), xp.out, model_name=o.model)
        return {name: trained.mask for name, trained in found.items()}

    with xp.timed("calibration: masks"):
        runs = calibration_masks(xp.model, plan, train, data_dir=o.data_dir)
    with xp.timed(f"calibration: {len(runs)} runs judged"):
        judged = judge_runs(xp.model, plan, runs, batch_size=o.eval_batch_size)
    xp.table(judged.assign(plan_sha256=plan.sha256), "verdict_calibration_runs", float_format=None)
    table = calibration_table(judged, plan).assign(plan_sha256=plan.sha256)
    xp.table(table, "verdict_calibration", float_format=None)
    return table


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
