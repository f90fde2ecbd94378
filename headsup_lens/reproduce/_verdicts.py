"""A verdict per claim of the paper, judged by a results folder's analysis plan (`AnalysisPlan`).

`claim_verdicts` reads the plan (`<folder>/analysis_plan.toml`; without one it judges nothing) and, for
every entry, the committed tables of the masks it names: each planned seed's mask at the entry's budget
(`masks/<task>[_seed<k>].safetensors` and the folder's settings tables, or a run trained on the paper's
schedule, `paper_schedule/<task>[_seed<k>]/step<N>/<model>/`, its last evaluated step). The outputs are
scored again by the plan's primary metric (`paper_hit`: the paper's protocol on whole words, echoes not
hits) and judged by the plan's rules (`evaluation._rules`):

- **elicits** (Tables 1/2): the masked model against the original, the majority label (label tasks)
  and, where it beats the original, the instructed model; exact McNemar tests on the same examples;
- **random**: the learned mask against random masks of its per-layer shape that keep the model as
  fluent as the learned mask (`random_masks_fluent_<task>.csv`, drawn by the plan's filter);
- **specific**: the task's own mask against every other task's mask on its inputs (the cross-task swaps);
- **fig4**: the masked run's last-layer block output closer to the instructed run's than the original's;
- **fig6**: scaling the heads outside the mask lowers the instructed loss, more than random head sets;
- **fig2**: removal in the mask's weight order switches to the answer earlier than a random order of
  the same heads (`fig2_order_rates_<task>.csv`).

Claims after `elicits` are tested on the first planned seed whose mask elicits the task, in the plan's
`sequence` (fixed-sequence testing: a claim is tested once every claim before it reproduces; one whose
table was not run spends nothing). Every row carries the plan's sha256 and the entry's `preregistered`.
A damaged table (unreadable, without its columns or rows, a NaN score) is a `ValueError` naming the file.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from .._io import find_table
from ..analysis import AlphaControl
from ..data import Task, load_task
from ..evaluation import paper_hit
from ..evaluation._plan import AnalysisPlan, ClaimPlan, PlanError, plan_path
from ..evaluation._rules import (
    NOT_RUN,
    REPRODUCES,
    UNTESTABLE,
    Judgement,
    beats,
    headline_rows,
    judge_elicits,
    judge_paired_greater,
    judge_random,
    judge_specific,
    null_outcome,
)
from ..evaluation._scoring import balanced_accuracy, is_strict, task_labels
from ..masks import HeadMask
from ..training import TrainConfig, safe_name

CLAIMS = {
    "elicits": "A mask learned without instruction makes the model do the task (Tables 1/2)",
    "random": "The mask, not the number of removed heads, does it (fluency-kept random masks)",
    "specific": "The mask is the task's own: other tasks' masks do not do it (cross-task swaps)",
    "fig4": "The masked run's representations approach the instructed run's (Fig. 4)",
    "fig6": "Scaling the heads outside the mask lowers the instructed loss (Fig. 6)",
    "fig2": "Removing the mask's heads in order of its weights switches to the answer sooner than in random order (Fig. 2)",
}
ANALYSED_SEED = 0  # the seed whose mask the sweeps, similarity and alpha tables (Figs. 2, 4, 6) analyse
PAPER = TrainConfig()
FAST = TrainConfig.fast()
TEXT = {"input": str, "answer": str, "output": str, "setting": str, "task": str, "mask_task": str, "mask": str}
COLUMNS = (
    "task",
    "claim",
    "statement",
    "verdict",
    "headline",
    "schedule",
    "steps",
    "batch_size",
    "examples",
    "paper_examples",
    "seeds",
    "seed_list",
    "eliciting_seeds",
    "judged_seed",
    "random_draws",
    "metric",
    "accuracy",
    "ci_low",
    "ci_high",
    "strict_accuracy",
    "p_value",
    "level",
    "effect",
    "effect_low",
    "effect_high",
    "min_effect",
    "evidence",
    "preregistered",
    "plan_sha256",
)


@dataclass(frozen=True)
class Budget:
    """What a mask was trained on: optimisation steps, examples per step and their product."""

    steps: int
    batch_size: int

    @property
    def examples(self) -> int:
        return self.steps * self.batch_size

    @property
    def schedule(self) -> str:
        """`paper` or `fast` when the budget is theirs (steps and batch), else `steps×batch`."""
        budget = (self.steps, self.batch_size)
        named = (name for name, c in (("paper", PAPER), ("fast", FAST)) if budget == (c.steps, c.batch_size))
        return next(named, f"{self.steps}×{self.batch_size}")


def mask_budget(path: str | os.PathLike) -> Budget:
    """The budget of a stored mask: `steps` (or a checkpoint's `step`) and `batch_size` from its
    metadata, else from the `train_config.json` of the run folder it lies in (a checkpoint's mask
    written before masks recorded their batch). A mask that records neither is a ValueError."""
    path = Path(path)
    meta = HeadMask.load(path, allow_missing_model=True).metadata
    steps, batch = meta.get("steps", meta.get("step")), meta.get("batch_size")
    if batch is None:
        for folder in path.parents[:4]:
            config = folder / "train_config.json"
            if config.is_file():
                recorded = json.loads(config.read_text(encoding="utf-8"))
                batch = recorded.get("batch_size")
                steps = steps if steps is not None else recorded.get("steps")
                break
    if steps is None or batch is None:
        raise ValueError(f"{path} records no training budget (metadata steps and batch_size)")
    return Budget(int(steps), int(batch))


# ---------------------------------------------------------------------------------------------- tables
def read_checked(path: Path, columns: tuple[str, ...] = (), *, texts: bool = False) -> pd.DataFrame:
    """A committed table, or a ValueError naming the file: unreadable (truncated, not CSV), without a
    row, or without one of `columns`. `texts`: a generations table, whose empty outputs stay empty
    strings (elsewhere an empty cell is a missing number)."""
    try:
        frame = pd.read_csv(path, keep_default_na=False, dtype=dict(TEXT), na_values=None if texts else [""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, EOFError, OSError) as error:
        raise ValueError(f"{path}: damaged table, cannot be read ({str(error).splitlines()[0]})") from None
    if frame.empty:
        raise ValueError(f"{path}: damaged table, it holds no rows")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: damaged table, no column {', '.join(map(repr, missing))}")
    return frame


@dataclass(frozen=True)
class _Run:
    """Where one seed's mask of a task and its tables are: the folder holding its settings table, the
    row naming it there, the mask file and the suffix of its own control tables."""

    task: str
    seed: int
    folder: Path
    setting: str
    mask: Path
    own: str  # "" for tables of the folder's seed-0 mask, "_seed<k>" for another seed's

    def table(self, artifact: str, own: bool = True) -> Path | None:
        """`<artifact>_<task>.csv` (a model's folder) or `<artifact>.csv` (a single-task folder), also
        gzipped; with `own`, this seed's own table (`<artifact>_seed<k>_<task>`: a control drawn for it)
        rather than the folder's shared one (a settings table holds every seed's rows)."""
        stem, suffix = safe_name(self.task), self.own if own else ""
        return find_table(self.folder, f"{artifact}{suffix}_{stem}", f"{artifact}{suffix}")


def _candidates(folder: Path, task: str, seed: int) -> list[_Run]:
    """The places a seed's mask of `task` may be: the model folder's masks, or a run on another schedule."""
    stem = safe_name(task)
    suffix = "" if seed == 0 else f"_seed{seed}"
    found = [
        _Run(
            task,
            seed,
            folder,
            "masked" if seed == 0 else f"masked, seed {seed}",
            folder / "masks" / f"{stem}{suffix}.safetensors",
            suffix,
        )
    ]
    schedule = folder / "paper_schedule" / f"{task}{suffix}"
    evaluated = sorted(
        schedule.glob("step*/*/tables12_evaluation*.csv"), key=lambda p: int(re.sub(r"\D", "", p.parts[-3]) or 0)
    )
    if evaluated:
        last = evaluated[-1].parent
        step = last.parent.name
        found.append(_Run(task, seed, last, "masked", schedule / "step_masks" / step / f"{stem}.safetensors", ""))
    return [run for run in found if run.mask.is_file()]


def _locate(folder: Path, entry: ClaimPlan, seed: int) -> _Run | None:
    """The run of `seed` at the entry's budget, or None (not trained at that budget)."""
    for run in _candidates(folder, entry.task, seed):
        budget = mask_budget(run.mask)
        if (budget.steps, budget.batch_size) == (entry.steps, entry.batch_size):
            return run
    return None


class _Outputs:
    """The settings table and generations of one folder and task, checked, with hits by the plan's metric."""

    def __init__(self, run: _Run, task: Task, plan: AnalysisPlan) -> None:
        self.task, self.plan = task, plan
        path = run.table("tables12_evaluation", own=False)
        texts = run.table("tables12_generations", own=False)
        if path is None or texts is None:
            raise FileNotFoundError(f"{run.folder}: no tables12_evaluation / tables12_generations of {task.name}")
        self.path, self.texts_path = path, texts
        self.table = read_checked(path, ("setting", "accuracy"))
        self.texts = read_checked(texts, ("setting", "example", "input", "answer", "output"), texts=True)

    def has(self, setting: str) -> bool:
        return setting in set(self.table.setting)

    def rows(self, setting: str) -> pd.DataFrame:
        """The outputs of `setting`, examples 0..n-1 once each, as its table row counts them."""
        found = self.table.loc[self.table.setting == setting]
        if found.empty:
            raise ValueError(f"{self.path}: damaged table, no {setting!r} row")
        row = found.iloc[0]
        if pd.isna(row.accuracy):
            raise ValueError(f"{self.path}: damaged table, the {setting!r} row's accuracy is NaN (rescore it)")
        part = self.texts.loc[self.texts.setting == setting].sort_values("example", kind="mergesort")
        n = int(row.n_examples) if "n_examples" in row and pd.notna(row.n_examples) else len(part)
        if part.empty or part.example.astype(int).tolist() != list(range(n)):
            raise ValueError(
                f"{self.texts_path}: damaged table, the outputs of {setting!r} are not examples 0..{n - 1} once each "
                f"({len(part)} rows)"
            )
        return part

    def hits(self, setting: str, metric: str | None = None) -> np.ndarray:
        part = self.rows(setting)
        metric = metric or self.plan.metric.primary
        if metric == "strict":
            return np.array([is_strict(o, a) for o, a in zip(part.output, part.answer)], dtype=bool)
        words = self.plan.metric.echo_min_words
        return np.array(
            [paper_hit(o, a, x, self.task.matcher, words) for o, a, x in zip(part.output, part.answer, part.input)],
            dtype=bool,
        )

    def inputs(self, setting: str) -> list[str]:
        return self.rows(setting).input.tolist()


# ---------------------------------------------------------------------------------------------- verdicts
def claim_verdicts(
    folder: str | os.PathLike, plan: AnalysisPlan | str | os.PathLike | None = None, data_dir: str | None = None
) -> pd.DataFrame:
    """One row per plan entry (claim, task, budget, seeds) with its verdict, judged by the plan (default
    `<folder>/analysis_plan.toml`; `COLUMNS`). Without a plan nothing is judged (`PlanError`)."""
    folder = Path(folder)
    if not isinstance(plan, AnalysisPlan):
        plan = AnalysisPlan.read(plan if plan is not None else plan_path(folder))
    rows: list[dict] = []
    for family in _families(plan):
        rows += _judge_family(folder, plan, family, data_dir)
    for row, headline in zip(rows, headline_rows(rows, plan)):
        row["headline"] = headline
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _families(plan: AnalysisPlan) -> list[list[ClaimPlan]]:
    """The plan's entries grouped by task, budget and seeds, each group in the plan's `sequence`."""
    groups: dict[tuple, list[ClaimPlan]] = {}
    for entry in plan.claims:
        groups.setdefault((entry.task, entry.steps, entry.batch_size, entry.seeds), []).append(entry)
    order = {claim: i for i, claim in enumerate(plan.sequence)}
    return [sorted(group, key=lambda e: order[e.claim]) for group in groups.values()]


def _judge_family(folder: Path, plan: AnalysisPlan, family: list[ClaimPlan], data_dir: str | None) -> list[dict]:
    first = family[0]
    task = load_task(first.task, data_dir)
    runs = {seed: _locate(folder, first, seed) for seed in first.seeds}
    outputs = {seed: _Outputs(run, task, plan) for seed, run in runs.items() if run is not None and _has_tables(run)}
    judged: dict[str, Judgement] = {}
    blocked: str | None = None
    pending = False  # the elicitation is "not run": what follows it waits, it is not untestable
    eliciting: tuple[int, ...] = ()
    for entry in family:
        if entry.claim == "elicits":
            judgement = _elicits(plan, entry, outputs, runs)
            eliciting = judgement.passing
            pending = judgement.verdict == NOT_RUN
        elif blocked is not None:
            judgement = Judgement(NOT_RUN if pending else UNTESTABLE, blocked)
        else:
            judgement = _secondary(folder, plan, entry, task, runs, outputs, eliciting)
        judged[entry.claim] = judgement
        if judgement.verdict == NOT_RUN and entry.claim != "elicits":
            continue  # not tested: it spends nothing, the sequence goes on
        if judgement.verdict != REPRODUCES and blocked is None:
            blocked = (
                ("waits for the elicitation verdict (not run)" if pending else "the mask does not elicit the task")
                if entry.claim == "elicits"
                else f"fixed sequence: {entry.claim!r} was not established ({judgement.verdict})"
            )
    accuracy = _accuracy(plan, first, outputs)
    rows = []
    for entry in family:
        judgement = judged[entry.claim]
        budget = Budget(entry.steps, entry.batch_size)
        shown = eliciting[0] if eliciting else None
        draws = _draws_count(runs.get(shown)) if entry.claim == "random" and shown is not None else None
        rows.append(
            {
                "task": entry.task,
                "claim": entry.claim,
                "statement": CLAIMS[entry.claim],
                "verdict": judgement.verdict,
                "schedule": budget.schedule,
                "steps": entry.steps,
                "batch_size": entry.batch_size,
                "examples": entry.examples,
                "paper_examples": plan.paper_examples,
                "seeds": len(entry.seeds),
                "seed_list": " ".join(map(str, entry.seeds)),
                "eliciting_seeds": len(eliciting),
                "judged_seed": shown if entry.claim != "elicits" and shown is not None else math.nan,
                "random_draws": draws if draws is not None else math.nan,
                "metric": plan.metric.primary,
                **accuracy,
                "p_value": judgement.p,
                "level": judgement.level,
                "effect": judgement.effect,
                "effect_low": judgement.effect_low,
                "effect_high": judgement.effect_high,
                "min_effect": entry.min_effect,
                "evidence": judgement.evidence,
                "preregistered": entry.preregistered,
                "plan_sha256": plan.sha256 or "",
            }
        )
    return rows


def _has_tables(run: _Run) -> bool:
    return (
        run.table("tables12_evaluation", own=False) is not None
        and run.table("tables12_generations", own=False) is not None
    )


def _accuracy(plan: AnalysisPlan, entry: ClaimPlan, outputs: dict[int, _Outputs]) -> dict[str, float]:
    """The masked models' accuracy by the primary metric, averaged over the entry's seeds that were run,
    with its bootstrap interval over the examples, and the strict matcher's."""
    found = {seed: out for seed, out in outputs.items() if seed in entry.seeds}
    if not found:
        return {"accuracy": math.nan, "ci_low": math.nan, "ci_high": math.nan, "strict_accuracy": math.nan}
    settings = {seed: _setting(out, seed) for seed, out in found.items()}
    hits = np.stack([found[s].hits(settings[s]) for s in found]).astype(float)
    strict = np.stack([found[s].hits(settings[s], "strict") for s in found]).astype(float)
    rng = np.random.default_rng(plan.bootstrap_seed)
    index = rng.integers(0, hits.shape[1], size=(plan.bootstrap_resamples, hits.shape[1]))
    means = hits[:, index].mean(-1).mean(0)
    tail = (1 - plan.confidence) / 2 * 100
    return {
        "accuracy": float(hits.mean()),
        "ci_low": float(np.percentile(means, tail)),
        "ci_high": float(np.percentile(means, 100 - tail)),
        "strict_accuracy": float(strict.mean()),
    }


def _setting(outputs: _Outputs, seed: int) -> str:
    """The row of a seed's mask: its own folder's "masked", or "masked, seed k" beside seed 0's."""
    name = f"masked, seed {seed}"
    return name if seed and outputs.has(name) else "masked"


def _elicits(
    plan: AnalysisPlan, entry: ClaimPlan, outputs: dict[int, _Outputs], runs: dict[int, _Run | None]
) -> Judgement:
    missing = [s for s in entry.seeds if s not in outputs]
    if missing:
        why = ", ".join(
            f"seed {s}: {'no mask trained at ' + f'{entry.steps}×{entry.batch_size}' if runs.get(s) is None else 'no settings table'}"
            for s in missing
        )
        done = [s for s in entry.seeds if s in outputs]
        return Judgement(NOT_RUN, why + (f"; {_interim(plan, entry, outputs, done)}" if done else ""))
    reference = outputs[entry.seeds[0]]
    original = reference.hits("original")
    for _seed, out in outputs.items():  # every seed's folder scored the same reference models
        if out is not reference and out.hits("original").tolist() != original.tolist():
            raise ValueError(f"{out.path}: its original model's outputs differ from {reference.path}'s")
    instructed = reference.hits("instructed") if reference.has("instructed") else None
    labels = task_labels(reference.task)
    majority = reference.hits("majority label") if labels is not None and reference.has("majority label") else None
    masked = {seed: outputs[seed].hits(_setting(outputs[seed], seed)) for seed in entry.seeds}
    judgement = judge_elicits(plan, entry, masked, original, instructed, majority)
    if labels is not None:
        shown = judgement.passing[0] if judgement.passing else entry.seeds[0]
        part = outputs[shown].rows(_setting(outputs[shown], shown))
        gold = [labels.gold(x, a) for x, a in zip(part.input, part.answer)]
        predicted = [labels.predicted(o, x) for o, x in zip(part.output, part.input)]
        evidence = f"{judgement.evidence}; seed {shown}'s balanced accuracy {balanced_accuracy(gold, predicted):.2f}"
        judgement = replace(judgement, evidence=evidence)
    return judgement


def _interim(plan: AnalysisPlan, entry: ClaimPlan, outputs: dict[int, _Outputs], done: list[int]) -> str:
    """What the seeds already in show, each against the original, the majority label on label tasks
    and the instructed model where it beats the original (as the rule compares them), at the level of
    the complete plan: a report, not a verdict (the rule needs every seed)."""
    level = plan.level(entry)
    parts = []
    for seed in done:
        out = outputs[seed]
        masked = out.hits(_setting(out, seed))
        bases = ["original"] + (["majority label"] if task_labels(out.task) and out.has("majority label") else [])
        if out.has("instructed") and beats(out.hits("instructed"), out.hits("original"), level)[0]:
            bases.append("instructed")
        tests = ", ".join(f"{name} {_against(masked, out.hits(name), level)}" for name in bases)
        parts.append(f"seed {seed} masked {masked.mean():.2f} against {tests}")
    return f"so far, not a verdict: {'; '.join(parts)}; each test at p < {level:.3g} once every seed is in"


def _against(masked: np.ndarray, other: np.ndarray, level: float) -> str:
    """`0.64 (ahead, p = 0.087)`: the other's accuracy, which side the masked model is on, McNemar's p."""
    side = "ahead" if masked.sum() > other.sum() else "behind" if masked.sum() < other.sum() else "level"
    return f"{other.mean():.2f} ({side}, p = {beats(masked, other, level)[1]:.2g})"


def _secondary(
    folder: Path,
    plan: AnalysisPlan,
    entry: ClaimPlan,
    task: Task,
    runs: dict[int, _Run | None],
    outputs: dict[int, _Outputs],
    eliciting: tuple[int, ...],
) -> Judgement:
    """A claim about how the first eliciting seed's mask does its task."""
    seed = eliciting[0]
    run, out = runs[seed], outputs[seed]
    assert run is not None
    own = out.hits(_setting(out, seed))
    prefix = f"seed {seed}: "
    if entry.claim == "random":
        judgement = _random(plan, entry, run, task)
    elif entry.claim == "specific":
        judgement = _specific(folder, plan, entry, task, own, out.inputs(_setting(out, seed)))
    elif entry.claim == "fig4":
        judgement = _fig4(plan, entry, run)
    elif entry.claim == "fig6":
        judgement = _fig6(plan, entry, run)
    else:
        judgement = _fig2(plan, entry, run)
    return replace(judgement, evidence=prefix + judgement.evidence)


def _draws_count(run: _Run | None) -> int | None:
    path = run.table("random_masks_fluent") if run is not None else None
    if path is None:
        return None
    return int((read_checked(path, ("mask",))["mask"] == "random").sum())


def _random(plan: AnalysisPlan, entry: ClaimPlan, run: _Run, task: Task) -> Judgement:
    path, texts = run.table("random_masks_fluent"), run.table("random_masks_fluent_generations")
    if path is None or texts is None:
        return Judgement(NOT_RUN, "no random_masks_fluent table (fluency-kept random masks) for this mask")
    draws = read_checked(path, ("mask", "draw"))
    generations = read_checked(texts, ("mask", "draw", "example", "input", "answer", "output"), texts=True)
    words = plan.metric.echo_min_words

    def hits(kind: str, draw: int) -> np.ndarray:
        part = generations.loc[(generations["mask"] == kind) & (generations.draw.astype(int) == draw)]
        part = part.sort_values("example", kind="mergesort")
        if part.empty:
            raise ValueError(f"{texts}: damaged table, no outputs of the {kind} mask {draw}")
        return np.array(
            [paper_hit(o, a, x, task.matcher, words) for o, a, x in zip(part.output, part.answer, part.input)]
        )

    numbers = sorted(int(d) for d in draws.loc[draws["mask"] == "random", "draw"])
    if entry.draws is not None and len(numbers) < entry.draws:
        return Judgement(NOT_RUN, f"{len(numbers)} fluency-kept random masks, the plan's {entry.draws} not all drawn")
    numbers = numbers[: entry.draws] if entry.draws is not None else numbers
    return judge_random(plan, entry, hits("learned", -1), [hits("random", k) for k in numbers])


def _specific(
    folder: Path, plan: AnalysisPlan, entry: ClaimPlan, task: Task, own: np.ndarray, inputs: list[str]
) -> Judgement:
    """The task's mask against every other task's (seed-0, fast) mask on the same held-out inputs."""
    others: dict[str, np.ndarray] = {}
    words = plan.metric.echo_min_words
    for path in sorted(folder.glob("cross_task_generations_*.csv*")):
        frame = read_checked(path, ("task", "mask_task", "example", "input", "answer", "output"), texts=True)
        part = frame.loc[(frame.task == task.name) & (frame.mask_task != task.name)]
        for mask_task, rows in part.groupby("mask_task", sort=True):
            rows = rows.sort_values("example", kind="mergesort")
            if rows.input.tolist() != inputs:
                raise ValueError(
                    f"{path}: the outputs of {mask_task}'s mask on {task.name} are not on its held-out inputs"
                )
            others[str(mask_task)] = np.array(
                [paper_hit(o, a, x, task.matcher, words) for o, a, x in zip(rows.output, rows.answer, rows.input)]
            )
    return judge_specific(plan, entry, own, others)


def _fig4(plan: AnalysisPlan, entry: ClaimPlan, run: _Run) -> Judgement:
    path = run.table("fig4_similarity") if not run.own else None
    if path is None:
        return Judgement(NOT_RUN, "no fig4_similarity table for this mask")
    table = read_checked(path, ("layer", "comparison", "block_out"))
    last = table[table.layer == table.layer.max()]
    key = "example" if "example" in last else "input"  # the inputs pair the comparisons (older tables name them)
    by = last.pivot_table(index=key, columns="comparison", values="block_out")
    for needed in ("masked vs instructed", "original vs instructed"):
        if needed not in by:
            raise ValueError(f"{path}: damaged table, no {needed!r} rows at the last layer")
    what = "last layer's block output, cosine to the instructed run: masked vs original"
    return judge_paired_greater(plan, entry, by["masked vs instructed"], by["original vs instructed"], what)


def _fig6(plan: AnalysisPlan, entry: ClaimPlan, run: _Run) -> Judgement:
    path = run.table("fig6_alpha_control") if not run.own else None
    if path is None:
        return Judgement(NOT_RUN, "no fig6_alpha_control table for this mask")
    table = read_checked(path, ("alpha_test", "n_scaled", "head_set"))
    control = AlphaControl(
        task=entry.task, alpha_test=float(table.alpha_test.iloc[0]), n_scaled=int(table.n_scaled.iloc[0]), table=table
    )
    summary = control.summary(
        confidence=plan.confidence, n_resamples=plan.bootstrap_resamples, seed=plan.bootstrap_seed
    )
    own = summary.loc[summary.head_set == "outside the mask"].iloc[0]
    random = summary.loc[summary.head_set != "outside the mask"]
    beats = bool((own.loss_drop_low > random.loss_drop).all()) if len(random) else False
    scale = float(own.loss_at_1)
    low, high = float(own.loss_drop_low) / scale, float(own.loss_drop_high) / scale
    evidence = (
        f"instructed loss {own.loss_at_1:.3f} at α 1.0, {own.loss_at_test:.3f} at α {own.alpha_test:g}: drop "
        f"{own.loss_drop:.3f} [{own.loss_drop_low:.3f}, {own.loss_drop_high:.3f}] ({own.relative_drop:.0%}); "
        f"{len(random)} random sets of {own.n_scaled} heads: drop up to {random.loss_drop.max():.3f}"
    )
    holds = own.loss_drop_low > 0 and own.relative_drop >= entry.min_effect and beats
    verdict = REPRODUCES if holds else null_outcome(plan, entry, high)
    return Judgement(verdict, evidence, math.nan, 1 - plan.confidence, float(own.relative_drop), low, high)


def _fig2(plan: AnalysisPlan, entry: ClaimPlan, run: _Run) -> Judgement:
    path = run.table("fig2_order_rates") if not run.own else None
    if path is None:
        return Judgement(NOT_RUN, "no fig2_order_rates table (weight order vs a random order of the same heads)")
    table = read_checked(path, ("example", "order", "switch_step", "last_step", "stride"))
    past = table.last_step + table.stride  # an input that never switches counts one step past the sweep
    table = table.assign(step=table.switch_step.fillna(past) / table.last_step)
    by = table.pivot_table(index="example", columns="order", values="step")
    for needed in ("weight", "shuffled"):
        if needed not in by:
            raise ValueError(f"{path}: damaged table, no {needed!r} order")
    what = "switch step as a share of the sweep, random order of the same heads vs weight order"
    return judge_paired_greater(plan, entry, by["shuffled"], by["weight"], what)


def nearest_plan(folder: str | os.PathLike) -> AnalysisPlan:
    """The plan of a results folder: its own `analysis_plan.toml`, else the nearest one above it (a run
    on the paper's schedule inside a model's folder is judged by the model's plan)."""
    folder = Path(folder).resolve()
    for here in (folder, *folder.parents):
        if plan_path(here).is_file():
            return AnalysisPlan.read(plan_path(here))
    raise PlanError(f"{folder}: no analysis_plan.toml in it or above it (a verdict is judged only by a plan)")


def eliciting_seeds(folder: str | os.PathLike, task: str, data_dir: str | None = None) -> list[int]:
    """The seeds whose stored masks of `task` elicit it by the folder's plan (its first `elicits` entry of
    the task); none where the plan has no such entry or its tables are missing."""
    try:
        plan = AnalysisPlan.read(plan_path(folder))
    except PlanError:
        return []
    entries = plan.entries("elicits", task)
    if not entries:
        return []
    entry = entries[0]
    loaded = load_task(task, data_dir)
    outputs = {}
    for seed in entry.seeds:
        run = _locate(Path(folder), entry, seed)
        if run is not None and _has_tables(run):
            outputs[seed] = _Outputs(run, loaded, plan)
    return list(_elicits(plan, entry, outputs, dict.fromkeys(entry.seeds)).passing)
