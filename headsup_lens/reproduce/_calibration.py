"""The verdicts' rules calibrated where the truth is planted: how often they say "reproduces" for masks
that cannot elicit a task (the false rate, which must stay at most alpha) and for masks of planted
pathways (the power).

The runs are the organism plan's `[calibration]` (`CalibrationPlan`): planted runs are masks learned on
each task (`planted_seeds`); null runs are masks learned on the task with its training answers shuffled
over its inputs (no input-to-answer mapping left to learn), the planted pathway of another task (the
model then does that task, fluently and in the same format), and fluency-kept random masks of the
planted pathway's shape. Every run is judged under its task's plan entries as one seed's mask: the
elicitation rule, and each control's own test on the same mask whether or not the mask elicits (so a
control is shown failing where it should).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import binomtest
from transformer_lens.model_bridge import TransformerBridge

from .._progress import progress
from ..data import Task, load_task
from ..evaluation import EvalConfig, evaluate, fluent_random_mask_control, fluent_random_masks, neutral_rows
from ..evaluation._controls import TooFewFluentDraws
from ..evaluation._plan import AnalysisPlan, ClaimPlan
from ..evaluation._rules import NOT_RUN, REPRODUCES, Judgement, judge_elicits, judge_random, judge_specific
from ..masks import HeadMask
from ..organism import load_planted, planted_mask
from ..training import TrainConfig

NULL, PLANTED = "null", "planted"
TrainMasks = Callable[[Sequence[Task], int], dict[str, HeadMask]]  # (tasks, seed) -> mask by task name
SETTINGS = ("original", "instructed", "masked")


@dataclass(frozen=True)
class CalibrationRun:
    """One mask judged on one task: `kind` (null / planted), `source` (how the mask was made), its seed."""

    kind: str
    source: str
    task: str
    seed: int
    mask: HeadMask


def shuffled_task(task: Task, seed: int) -> Task:
    """`task` with its training answers shuffled over its training inputs (the held-out pairs as they are):
    a mask learned on it has no mapping from input to answer to find."""
    train, held = list(task.train_pairs), list(task.eval_pairs)
    answers = [y for _, y in train]
    random.Random(seed).shuffle(answers)
    pairs = tuple(zip([x for x, _ in train], answers)) + tuple(held)
    return dataclasses.replace(task, name=f"{task.name} (shuffled answers, seed {seed})", pairs=pairs)


def calibration_masks(
    model: TransformerBridge,
    plan: AnalysisPlan,
    train: TrainMasks,
    *,
    data_dir: str | None = None,
) -> list[CalibrationRun]:
    """Every run of the plan's `[calibration]` (`train(tasks, seed)`: learned masks by task name)."""
    calibration = plan.calibration
    if calibration is None:
        raise ValueError(f"plan {plan.name!r} has no [calibration] table")
    names = plan.tasks()
    tasks = [load_task(name, data_dir) for name in names]
    planted = load_planted()
    runs: list[CalibrationRun] = []
    for seed in calibration.planted_seeds:
        learned = train(tasks, seed)
        runs += [CalibrationRun(PLANTED, "learned", t.name, seed, learned[t.name]) for t in tasks]
    for seed in calibration.shuffled_seeds:
        shuffled = [shuffled_task(t, seed) for t in tasks]
        learned = train(shuffled, seed)
        runs += [
            CalibrationRun(NULL, "shuffled answers", t.name, seed, learned[s.name]) for t, s in zip(tasks, shuffled)
        ]
    for offset in range(1, calibration.other_pathways + 1):
        for i, task in enumerate(names):
            other = names[(i + offset) % len(names)]
            runs.append(CalibrationRun(NULL, f"pathway of {other}", task, 0, planted_mask(planted, other, model)))
    rows = {
        t.name: neutral_rows(model, plan.controls.neutral_text, plan.controls.neutral_examples, task=t.name)
        for t in tasks
    }
    for seed in range(calibration.random_masks):
        for task in names:
            shape = planted_mask(planted, task, model)
            c = plan.controls
            found = fluent_random_masks(
                model, shape, rows[task], n_draws=1, pool=c.pool, tolerance=c.fluency_tolerance, seed=1000 + seed
            )
            if not found.masks:
                raise ValueError(f"{task}: no fluency-kept random mask of the planted pathway's shape")
            runs.append(CalibrationRun(NULL, "random (fluency-kept)", task, seed, found.masks[0]))
    return runs


def _entry(plan: AnalysisPlan, claim: str, task: str) -> ClaimPlan:
    found = plan.entries(claim, task)
    if not found:
        raise ValueError(f"plan {plan.name!r} has no {claim!r} entry for {task}")
    return found[0]


def judge_runs(
    model: TransformerBridge, plan: AnalysisPlan, runs: Sequence[CalibrationRun], *, batch_size: int = 64
) -> pd.DataFrame:
    """Every run judged: one row per run with its elicitation verdict (`elicits`), the same rule with the
    real models' `instructed = "beat"` (`elicits_beat`), and each control's own verdict on the mask
    (`random`, `specific`; tested whether or not the mask elicits), their p-values and accuracies."""
    config = EvalConfig(batch_size=batch_size, settings=SETTINGS, progress=False)
    beat = dataclasses.replace(plan, instructed="beat")
    own_masks = {r.task: r.mask for r in runs if r.kind == PLANTED and r.seed == min(plan.calibration.planted_seeds)}  # type: ignore[union-attr]
    others_of: dict[str, dict[str, np.ndarray]] = {}  # task -> the other tasks' masks' hits on it
    neutral: dict[str, list] = {}
    rows = []
    with progress(total=len(runs), desc="calibration: judging", unit="run") as bar:
        for run in runs:
            task = load_task(run.task)
            result = evaluate(model, task, run.mask, config)
            hits = {
                s: result.generations.loc[result.generations.setting == s]
                .sort_values("example")
                .correct.to_numpy(dtype=bool)
                for s in SETTINGS
            }
            entry = _entry(plan, "elicits", run.task)
            one = dataclasses.replace(entry, seeds=(0,))
            elicits = judge_elicits(plan, one, {0: hits["masked"]}, hits["original"], hits["instructed"])
            elicits_beat = judge_elicits(beat, one, {0: hits["masked"]}, hits["original"], hits["instructed"])
            if run.task not in neutral:  # the neutral text of a task: the same for every run of it
                c = plan.controls
                neutral[run.task] = neutral_rows(model, c.neutral_text, c.neutral_examples, task=run.task)
            random = _random_control(model, plan, task, run, config, neutral[run.task])
            if run.task not in others_of:
                others_of[run.task] = {}
                for name, mask in own_masks.items():
                    if name != run.task:
                        other = evaluate(model, task, mask, dataclasses.replace(config, settings=("masked",)))
                        others_of[run.task][name] = other.generations.sort_values("example").correct.to_numpy(
                            dtype=bool
                        )
            specific = judge_specific(plan, _entry(plan, "specific", run.task), hits["masked"], others_of[run.task])
            rows.append(
                {
                    "kind": run.kind,
                    "source": run.source,
                    "task": run.task,
                    "seed": run.seed,
                    "n_kept": run.mask.n_kept,
                    "accuracy": float(hits["masked"].mean()),
                    "original": float(hits["original"].mean()),
                    "instructed": float(hits["instructed"].mean()),
                    "elicits": elicits.verdict,
                    "elicits_p": elicits.p,
                    "elicits_beat": elicits_beat.verdict,
                    "random": random.verdict,
                    "random_p": random.p,
                    "random_effect": random.effect,
                    "random_evidence": random.evidence,
                    "specific": specific.verdict,
                    "specific_p": specific.p,
                }
            )
            bar.update(1)
    return pd.DataFrame(rows)


def _random_control(
    model: TransformerBridge,
    plan: AnalysisPlan,
    task: Task,
    run: CalibrationRun,
    config: EvalConfig,
    neutral: Sequence[tuple[list[int], list[int]]],
) -> Judgement:
    """The random-mask control on one run's mask, whether or not it elicits: "not run" where the
    fluency filter keeps too few draws within its tries (the plan's rule)."""
    c = plan.controls
    try:
        control = fluent_random_mask_control(
            model,
            task,
            run.mask,
            neutral,
            dataclasses.replace(config, settings=()),
            n_draws=_entry(plan, "random", run.task).draws or 20,
            pool=c.pool,
            tolerance=c.fluency_tolerance,
            max_candidates=c.max_candidates,
            seed=run.seed,
        )
    except TooFewFluentDraws as error:
        return Judgement(NOT_RUN, str(error))
    draws = control.generations
    learned = draws.loc[draws["mask"] == "learned"].sort_values("example").correct.to_numpy(dtype=bool)
    random_hits = [
        part.sort_values("example").correct.to_numpy(dtype=bool)
        for _, part in draws.loc[draws["mask"] == "random"].groupby("draw")
    ]
    return judge_random(plan, _entry(plan, "random", run.task), learned, random_hits)


def _sequence(row: dict) -> str:
    """The run's outcome under the fixed sequence the real verdicts use: elicits, then random, then
    specific, each tested only once the claims before it reproduce (one not run spends nothing)."""
    for claim in ("elicits", "random", "specific"):
        if row[claim] == NOT_RUN and claim != "elicits":
            continue
        if row[claim] != REPRODUCES:
            return row[claim]
    return REPRODUCES


def calibration_table(runs: pd.DataFrame, plan: AnalysisPlan) -> pd.DataFrame:
    """Per kind (null / planted) and claim: how many runs were judged (`runs`; a control its filter could
    not draw for is "not run" and counted in `not_run` instead), how many `reproduces`, the rate and
    its exact (Clopper-Pearson) interval at the plan's confidence; `alpha` beside it, the bound a null
    rate must not pass. `sequence`: the three claims in the plan's fixed sequence, as the verdicts
    judge a mask (a control is reached only by a mask that elicits)."""
    runs = runs.assign(sequence=[_sequence(row) for row in runs.to_dict("records")])
    rows = []
    for claim in ("elicits", "elicits_beat", "random", "specific", "sequence"):
        for kind in (NULL, PLANTED):
            part = runs.loc[runs.kind == kind]
            skipped = int((part[claim] == NOT_RUN).sum())
            part = part.loc[part[claim] != NOT_RUN]
            n, hits = len(part), int((part[claim] == REPRODUCES).sum())
            ci = binomtest(hits, n).proportion_ci(confidence_level=plan.confidence, method="exact") if n else None
            rows.append(
                {
                    "kind": kind,
                    "claim": claim,
                    "runs": n,
                    "not_run": skipped,
                    "reproduces": hits,
                    "rate": hits / n if n else math.nan,
                    "ci_low": ci.low if ci else math.nan,
                    "ci_high": ci.high if ci else math.nan,
                    "alpha": plan.alpha,
                }
            )
    return pd.DataFrame(rows)


def planted_config(plan: AnalysisPlan) -> TrainConfig:
    """The organism's training schedule for the calibration: its plan entries' budget on the fast preset."""
    entry = plan.claims[0]
    return TrainConfig.fast(steps=entry.steps, batch_size=entry.batch_size, checkpoint_every=entry.steps)
