"""The rules an `AnalysisPlan` states, on arrays of per-example results: three outcomes each.

Every rule returns a `Judgement`: `reproduces` when its test passes at the entry's level,
`does not reproduce` only where the budget is at least the paper's and the effect's interval lies below
the plan's smallest effect (a statement about power: an effect that large would have been seen),
`not elicited at this budget` for the same finding below the paper's budget, and `inconclusive`
otherwise. Effects and their intervals are percentile bootstraps over the examples, resampled
jointly for every array of a rule (the same examples were scored in every setting and seed).

These functions know nothing about files: any circuit study can call them on its own hits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import wilcoxon

from .._typecheck import checked
from ._plan import AnalysisPlan, ClaimPlan
from ._scoring import mcnemar_exact

REPRODUCES = "reproduces"
DOES_NOT = "does not reproduce"
INCONCLUSIVE = "inconclusive"
NOT_AT_BUDGET = "not elicited at this budget"
UNTESTABLE = "cannot be tested here"
NOT_RUN = "not run"
OUTCOMES = (REPRODUCES, DOES_NOT, INCONCLUSIVE, NOT_AT_BUDGET, UNTESTABLE, NOT_RUN)
CONCLUSIVE = (REPRODUCES, DOES_NOT)
Hits = Sequence[bool] | np.ndarray
"""True / False per example, the same examples in every array of a rule."""


@dataclass(frozen=True)
class Judgement:
    """One rule's answer: the outcome, the numbers it read, its test's p-value, the level it was run at,
    and the effect with its interval (NaN where the rule has none)."""

    verdict: str
    evidence: str
    p: float = math.nan
    level: float = math.nan
    effect: float = math.nan
    effect_low: float = math.nan
    effect_high: float = math.nan
    passing: tuple[int, ...] = ()
    """`elicits`: the seeds whose masks pass, in the plan's order."""


def _array(name: str, values: Hits) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype != bool:
        raise TypeError(f"{name} must be True/False per example, got dtype {array.dtype}")
    return array


def _bootstrap(plan: AnalysisPlan, n: int, statistic) -> tuple[float, float]:
    """Percentile interval of `statistic(indices)` (indices: [resamples, n]) over resampled examples."""
    rng = np.random.default_rng(plan.bootstrap_seed)
    index = rng.integers(0, n, size=(plan.bootstrap_resamples, n))
    values = np.asarray(statistic(index), dtype=float)
    tail = (1 - plan.confidence) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


@checked
def null_outcome(plan: AnalysisPlan, entry: ClaimPlan, high: float) -> str:
    """The outcome of a rule whose test did not pass: its interval against the smallest effect."""
    if high < entry.min_effect:
        return DOES_NOT if entry.examples >= plan.paper_examples else NOT_AT_BUDGET
    return INCONCLUSIVE


def beats(a: np.ndarray, b: np.ndarray, level: float) -> tuple[bool, float]:
    """Whether `a` scores more hits than `b` on the same examples with exact McNemar p below `level`."""
    p = mcnemar_exact(a.tolist(), b.tolist())
    return bool(a.sum() > b.sum() and p < level), p


def judge_elicits(
    plan: AnalysisPlan,
    entry: ClaimPlan,
    masked: Mapping[int, Hits],
    original: Hits,
    instructed: Hits | None = None,
    majority: Hits | None = None,
) -> Judgement:
    """The elicitation rule (the plan's `outcomes.elicits`): every planned seed's masked hits (`masked`,
    seed -> hits) against the original's, the majority label's (label tasks) and, where the instructed
    model beats the original, the instructed model's (`plan.instructed`: beat it, or match it within
    `min_effect`). A planned seed without hits is "not run"."""
    missing = [s for s in entry.seeds if s not in masked]
    if missing:
        return Judgement(NOT_RUN, f"no masked outputs of seed {', '.join(map(str, missing))}")
    level = plan.level(entry)
    base = {"original": _array("original", original)}
    if majority is not None:
        base["majority label"] = _array("majority", majority)
    n = len(base["original"])
    hits = {s: _array(f"masked seed {s}", masked[s]) for s in entry.seeds}
    for name, array in [*base.items(), *((f"seed {s}", h) for s, h in hits.items())]:
        if len(array) != n:
            raise ValueError(f"{name}: {len(array)} examples, the original has {n}")
    notes = []
    match = None
    if instructed is not None:
        instr = _array("instructed", instructed)
        ahead, p_instr = beats(instr, base["original"], level)
        notes.append(
            f"instructed {instr.mean():.2f} ({'beats' if ahead else 'does not beat'} the original, p = {p_instr:.2g})"
        )
        if ahead and plan.instructed == "beat":
            base["instructed"] = instr
        elif ahead:
            match = instr
    passing, p_of = [], {}
    for seed, h in hits.items():
        tests = [beats(h, b, level) for b in base.values()]
        ok = all(t[0] for t in tests)
        p_of[seed] = max(t[1] for t in tests)  # intersection-union: every comparison must pass
        if ok and match is not None:
            low, _ = _bootstrap(plan, n, lambda i, h=h: h[i].mean(-1) - match[i].mean(-1))
            ok = low > -entry.min_effect
        if ok:
            passing.append(seed)
    shown = passing[0] if passing else min(p_of, key=p_of.__getitem__)  # the p-value the row shows
    stack = np.stack([hits[s] for s in entry.seeds]).astype(float)
    bases = np.stack(list(base.values())).astype(float)
    effect = float((stack.mean() - bases.mean(-1)).min())
    low, high = _bootstrap(plan, n, lambda i: (stack[:, i].mean(-1).mean(0) - bases[:, i].mean(-1)).min(0))
    accuracies = ", ".join(f"seed {s} {hits[s].mean():.2f}" for s in entry.seeds)
    evidence = (
        f"{plan.metric.primary}: masked {accuracies}; "
        + ", ".join(f"{name} {b.mean():.2f}" for name, b in base.items())
        + (f"; {'; '.join(notes)}" if notes else "")
        + f"; {len(passing)} of {len(entry.seeds)} seeds pass at p < {level:.3g}"
        + f"; effect {effect:+.2f} [{low:+.2f}, {high:+.2f}] (smallest that counts {entry.min_effect:.2f})"
    )
    needed = math.ceil(len(entry.seeds) / 2)
    verdict = REPRODUCES if len(passing) >= needed else null_outcome(plan, entry, high)
    return Judgement(verdict, evidence, float(p_of[shown]), level, effect, low, high, tuple(passing))


def judge_random(plan: AnalysisPlan, entry: ClaimPlan, learned: Hits, draws: Sequence[Hits]) -> Judgement:
    """The random-mask control: the learned mask's hits against fluency-kept random masks' (one row
    per draw): permutation p = (1 + draws at least as good) / (1 + draws)."""
    mine = _array("learned", learned).astype(float)
    others = np.stack([_array(f"draw {k}", d) for k, d in enumerate(draws)]).astype(float)
    level = plan.level(entry)
    at_least = int((others.sum(-1) >= mine.sum()).sum())
    p = (1 + at_least) / (1 + len(others))
    effect = float(mine.mean() - others.mean())
    low, high = _bootstrap(plan, len(mine), lambda i: mine[i].mean(-1) - others[:, i].mean(-1).mean(0))
    evidence = (
        f"{plan.metric.primary}: learned {mine.mean():.2f}, {len(others)} fluency-kept random masks mean "
        f"{others.mean():.2f} (best {others.mean(-1).max():.2f}), {at_least} as good; effect {effect:+.2f} "
        f"[{low:+.2f}, {high:+.2f}]"
    )
    verdict = REPRODUCES if p < level else null_outcome(plan, entry, high)
    return Judgement(verdict, evidence, p, level, effect, low, high)


def judge_specific(plan: AnalysisPlan, entry: ClaimPlan, own: Hits, others: Mapping[str, Hits]) -> Judgement:
    """The cross-task control: the task's own mask against every other task's mask on its inputs."""
    mine = _array("own", own)
    if not others:
        return Judgement(NOT_RUN, "no other task's mask was run on this task")
    level = plan.level(entry)
    tests = {name: beats(mine, _array(name, h), level) for name, h in others.items()}
    stack = np.stack([_array(name, h) for name, h in others.items()]).astype(float)
    effect = float((mine.mean() - stack.mean(-1)).min())
    low, high = _bootstrap(plan, len(mine), lambda i: (mine[i].mean(-1) - stack[:, i].mean(-1)).min(0))
    best = max(others, key=lambda name: np.mean(others[name]))
    p = max(t[1] for t in tests.values())
    evidence = (
        f"{plan.metric.primary}: own mask {mine.mean():.2f}, best other ({best}'s) {np.mean(others[best]):.2f}; "
        f"beats {sum(t[0] for t in tests.values())} of {len(tests)} at p < {level:.3g}; effect {effect:+.2f} "
        f"[{low:+.2f}, {high:+.2f}]"
    )
    verdict = REPRODUCES if all(t[0] for t in tests.values()) else null_outcome(plan, entry, high)
    return Judgement(verdict, evidence, p, level, effect, low, high)


def judge_paired_greater(plan: AnalysisPlan, entry: ClaimPlan, a: ArrayLike, b: ArrayLike, what: str) -> Judgement:
    """`a` greater than `b` on the same inputs: one-sided Wilcoxon signed-rank test (Fig. 4: cosine of the
    masked vs the original run to the instructed run; Fig. 2: switch step in random vs weight order)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) != len(y) or len(x) < 2:
        return Judgement(NOT_RUN, f"{what}: {len(x)} and {len(y)} paired values")
    level = plan.level(entry)
    diff = x - y
    p = float(np.asarray(wilcoxon(x, y, alternative="greater")[1])) if np.any(diff != 0) else 1.0  # (statistic, p)
    effect = float(diff.mean())
    low, high = _bootstrap(plan, len(x), lambda i: diff[i].mean(-1))
    evidence = f"{what}: mean {x.mean():.3f} vs {y.mean():.3f} over {len(x)} inputs, difference {effect:+.3f} [{low:+.3f}, {high:+.3f}]"
    verdict = REPRODUCES if effect > 0 and p < level else null_outcome(plan, entry, high)
    return Judgement(verdict, evidence, p, level, effect, low, high)


def headline_rows(rows: Sequence[Mapping], plan: AnalysisPlan) -> list[bool]:
    """Which row is each (task, claim)'s headline (`plan.headline`): the verdict at the largest budget
    whose verdict is conclusive stands; at one budget a preregistered entry's stands over an exploratory
    one; with none conclusive, the largest budget's. A row "not run" has no verdict: it is the headline
    only where every row of its claim is "not run" (a run still going does not hide a judged one)."""
    chosen: dict[tuple[str, str], int] = {}
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row["task"], row["claim"]), []).append(i)
    for key, members in groups.items():
        ranked = sorted(
            members,
            key=lambda i: (rows[i]["verdict"] == NOT_RUN, -rows[i]["examples"], not rows[i]["preregistered"], i),
        )
        conclusive = [i for i in ranked if rows[i]["verdict"] in CONCLUSIVE]
        chosen[key] = conclusive[0] if conclusive else ranked[0]
    return [chosen[(row["task"], row["claim"])] == i for i, row in enumerate(rows)]
