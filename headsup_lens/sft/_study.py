"""The SFT paper's measurements on one fine-tuning run (Zhao, Du et al.): pattern changes, their
statistics before and after (Table 1, with intervals over the held-out examples and a reading over
seeds), their dynamics (Fig. 5), their grouping by related tasks (Fig. 2, also without the tasks that
share their inputs), the composition of a composite task's change from its basic tasks' (Eq. 3),
their overlap with the heads a Heads-up mask removes, and the fine-tuned model's held-out outputs.

Each takes what `finetune_` returns (or its patterns) and gives one table; the recipes of the paper's
runs live with the reproduction (`headsup_lens.reproduce._sft`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..analysis import (
    coefficient_of_variation,
    fit_pattern_change,
    gini,
    grouping_test,
    head_overlap,
    kurtosis,
    overlap_p_value,
    pattern_correlation,
    pattern_statistics,
    pattern_trajectory,
    shuffled_fit_r2,
    top_heads,
)
from ..data import Task
from ..evaluation import generations, score_outputs, task_labels
from ..masks import HeadMask
from ._finetune import FinetuneResult, pattern_subset

ALPHA = 0.05  # the level of every test read here
STATISTICS = {"gini": gini, "cv": coefficient_of_variation, "kurtosis": kurtosis}
SHARED_INPUTS = 0.1  # two tasks share their inputs when this share of the smaller one's inputs is the other's too
RISES, FALLS, INCONCLUSIVE = "rises", "falls", "inconclusive"


def pattern_changes(before: Mapping[str, Tensor], after: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Each task's activation-pattern change `after - before` (`[n_layers, n_heads]` each)."""
    missing = sorted(set(before) ^ set(after))
    if missing:
        raise ValueError(f"before and after must have the same tasks; {missing} are in only one")
    return {name: after[name] - before[name] for name in before}


def run_changes(result: FinetuneResult) -> dict[str, Tensor]:
    """The pattern change of every task over a whole run: the last recorded step minus the first."""
    steps = sorted(result.patterns)
    return pattern_changes(result.patterns[steps[0]], result.patterns[steps[-1]])


def statistics_before_after(
    before: Mapping[str, Tensor], after: Mapping[str, Tensor], **columns: float | int
) -> pd.DataFrame:
    """The paper's Table 1: Gini, CV and kurtosis (`pattern_statistics`) of each task's pattern
    before and after SFT, one row per task (`task`, `gini_before`, ..., `kurtosis_after`, then the
    constant `columns`, e.g. `n_examples`, `seed`), and a last row `mean` over the tasks."""
    a, b = pattern_statistics(before).set_index("pattern"), pattern_statistics(after).set_index("pattern")
    rows = [
        {
            "task": name,
            **{f"{k}_before": a.loc[name, k] for k in ("gini", "cv", "kurtosis")},
            **{f"{k}_after": b.loc[name, k] for k in ("gini", "cv", "kurtosis")},
            **columns,
        }
        for name in a.index
    ]
    table = pd.DataFrame(rows)
    mean = {"task": "mean", **table.drop(columns=["task"]).mean().to_dict()}
    return pd.concat([table, pd.DataFrame([mean])], ignore_index=True)


def pattern_dynamics(result: FinetuneResult, tasks: Sequence[str] | None = None) -> pd.DataFrame:
    """The paper's Fig. 5 as a table: per task (default: every task of the run) and recorded step,
    the correlation and MSE of its pattern to the final one (`pattern_trajectory`), and the greedy
    accuracy of that step when the run measured it."""
    steps = sorted(result.patterns)
    names = list(tasks) if tasks is not None else list(result.patterns[steps[-1]])
    rows = []
    for task in names:
        trajectory = pattern_trajectory({s: result.patterns[s][task] for s in steps})
        trajectory.insert(0, "task", task)
        rows.append(trajectory)
    dynamics = pd.concat(rows, ignore_index=True)
    if result.accuracy is not None:
        dynamics = dynamics.merge(result.accuracy, on=["step", "task"], how="left")
    return dynamics


def composition_fits(
    changes: Mapping[str, Tensor],
    composites: Sequence[tuple[str, str]],
    *,
    prefix: str = "",
    n_shuffles: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Eq. 3: the least-squares fit of each composite task's pattern change (`prefix + "a+b"`) from
    its two basic tasks' (`prefix + a`, `prefix + b`), one row per composite: R², the weights, the
    chance level of `n_shuffles` fits with the heads shuffled (`shuffled_fit_r2`: mean, 95th
    percentile, the share at least as good) and, as another control, the R² of every other pair of
    basic tasks of `changes` (max and mean; names with "+" are composites, not basic tasks)."""
    names = list(changes)
    rows = []
    for a, b in composites:
        target = f"{prefix}{a}+{b}"
        components = {f"{prefix}{a}": changes[f"{prefix}{a}"], f"{prefix}{b}": changes[f"{prefix}{b}"]}
        fit = fit_pattern_change(changes[target], components)
        chance = shuffled_fit_r2(changes[target], components, n=n_shuffles, seed=seed)
        others = [n for n in names if n not in (target, *components) and "+" not in n]
        pair_r2 = [
            fit_pattern_change(changes[target], {x: changes[x], y: changes[y]}).r2
            for i, x in enumerate(others)
            for y in others[i + 1 :]
        ]
        rows.append(
            {
                "composite": target,
                "r2": fit.r2,
                **{f"weight_{k.removeprefix(prefix)}": v for k, v in fit.coefficients.items()},
                "shuffled_r2_mean": chance.mean(),
                "shuffled_r2_p95": np.quantile(chance, 0.95),
                "shuffled_p": float((chance >= fit.r2).mean()),
                "other_pairs_r2_max": max(pair_r2) if pair_r2 else np.nan,
                "other_pairs_r2_mean": float(np.mean(pair_r2)) if pair_r2 else np.nan,
                "n_heads": changes[target].numel(),
                "seed": seed,
            }
        )
    return pd.DataFrame(rows)


def task_grouping(
    correlation: pd.DataFrame, groups: Sequence[Sequence[str]], overlap: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """Fig. 2's grouping test (`grouping_test`) of `groups` restricted to the tasks of `correlation`
    (tasks in no group stand alone): a row `related tasks` with `groups` ("a+b | c"), the test's
    fields and its reading (`grouped` at p < 0.05; `inconclusive` where even the best matrix could not
    reach that, `min_p`; else `not grouped`). With `overlap` (`input_overlap`), a second row
    `without shared inputs`: the groups whose tasks share their inputs (`SHARED_INPUTS`) are split,
    since identical inputs alone can make two changes alike. None when no group has two tasks."""
    names = list(correlation.index)
    kept = [[t for t in group if t in names] for group in groups]
    kept = [g for g in kept if g] + [[t] for t in names if not any(t in g for g in groups)]
    variants = {"related tasks": kept}
    if overlap is not None:
        close = overlap[overlap.share >= SHARED_INPUTS]
        shared = {frozenset(pair) for pair in zip(close.task_a, close.task_b)}
        variants["without shared inputs"] = [
            part for g in kept for part in ([[t] for t in g] if any(frozenset(q) in shared for q in itertools.combinations(g, 2)) else [g])
        ]  # fmt: skip
    rows = []
    for name, chosen in variants.items():
        if all(len(g) < 2 for g in chosen):
            if name == "related tasks":
                return None
            rows.append({"test": name, "groups": " | ".join("+".join(g) for g in chosen), "reading": INCONCLUSIVE})
            continue
        result = dataclasses.asdict(grouping_test(correlation, chosen))
        reading = (
            INCONCLUSIVE if result["min_p"] >= ALPHA else "grouped" if result["p_value"] < ALPHA else "not grouped"
        )
        rows.append({"test": name, "groups": " | ".join("+".join(g) for g in chosen), **result, "reading": reading})
    return pd.DataFrame(rows)


def mask_overlap(
    changes: Mapping[str, Tensor], masks: Mapping[str, HeadMask], eliciting: Mapping[str, bool] | None = None
) -> pd.DataFrame:
    """For each task with a learned Heads-up mask: the k heads whose pattern changed most (by
    |change| and by increase) against the k heads the mask removes (`head_overlap`: overlap, its
    expectation by chance and the hypergeometric p-value), and `power_p`, the p-value an overlap half
    again above chance would get. The reading, only for a mask that elicits its task (`eliciting`; a
    mask that does not may remove heads for other reasons): `above chance` at p < 0.05, `at chance`
    where the test could have seen half again as much (`power_p` < 0.05); else `inconclusive`. Tasks
    without a mask are skipped."""
    columns = ["task", "score", "k", "overlap", "expected", "p_value", "power_p", "n_heads", "mask_elicits", "reading"]
    eliciting = eliciting or {}
    rows = []
    for name, change in changes.items():
        if name not in masks:
            continue
        removed = (masks[name].values == 0).float()
        k, n = int(removed.sum()), removed.numel()
        elicits = bool(eliciting.get(name, False))
        power_p = overlap_p_value(math.ceil(1.5 * k * k / n), k, k, n)  # half again the chance overlap
        for kind, score in (("|change|", change.abs()), ("increase", change)):
            overlap = head_overlap(top_heads(score, k), removed)
            reading = INCONCLUSIVE
            if elicits and overlap.p_value < ALPHA:
                reading = "above chance"
            elif elicits and power_p < ALPHA:
                reading = "at chance"
            rows.append(
                {
                    "task": name,
                    "score": kind,
                    "k": k,
                    "overlap": overlap.overlap,
                    "expected": overlap.expected,
                    "p_value": overlap.p_value,
                    "power_p": power_p,
                    "n_heads": overlap.n,
                    "mask_elicits": elicits,
                    "reading": reading,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def statistic_changes(
    before: Mapping[str, Float[Tensor, "_ n_layers n_heads"]],
    after: Mapping[str, Float[Tensor, "_ n_layers n_heads"]],
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Table 1's changes with intervals. Per task (and `mean`, over the tasks) and statistic
    (`STATISTICS`): the statistic of the mean pattern `before` and `after` SFT, the change, and its
    percentile bootstrap interval over the held-out examples. Both patterns are taken on the same
    examples, so each resample draws the same examples from `before` and `after` (the example
    patterns of `analysis.example_patterns`). `mean`'s resample b is the mean of the tasks' b-th."""
    missing = sorted(set(before) ^ set(after))
    if missing:
        raise ValueError(f"before and after must have the same tasks; {missing} are in only one")
    if n_resamples < 1 or not 0 < confidence < 1:
        raise ValueError(f"need n_resamples >= 1 and 0 < confidence < 1, got {n_resamples} and {confidence}")
    rng = np.random.default_rng(seed)
    tail = 100 * (1 - confidence) / 2
    rows, draws = [], {name: [] for name in STATISTICS}
    for task in before:
        a, b = before[task].double(), after[task].double()
        if a.shape != b.shape:
            raise ValueError(f"{task}: before has shape {tuple(a.shape)}, after {tuple(b.shape)} (the same examples)")
        index = torch.from_numpy(rng.integers(0, len(a), size=(n_resamples, len(a))))
        resampled_a, resampled_b = a[index].mean(1), b[index].mean(1)  # [n_resamples, n_layers, n_heads]
        for name, statistic in STATISTICS.items():
            value_a, value_b = statistic(a.mean(0)), statistic(b.mean(0))
            change = np.array([statistic(y) - statistic(x) for x, y in zip(resampled_a, resampled_b)])
            draws[name].append(change)
            rows.append({"task": task, "statistic": name, "before": value_a, "after": value_b, "change": value_b - value_a,
                         "change_low": np.percentile(change, tail), "change_high": np.percentile(change, 100 - tail),
                         "n_examples": len(a)})  # fmt: skip
    table = pd.DataFrame(rows)
    for name in STATISTICS:
        own = table[table.statistic == name]
        mean = np.mean(draws[name], axis=0)
        rows.append({"task": "mean", "statistic": name, "before": own.before.mean(), "after": own.after.mean(),
                     "change": own.change.mean(), "change_low": np.percentile(mean, tail),
                     "change_high": np.percentile(mean, 100 - tail), "n_examples": int(own.n_examples.min())})  # fmt: skip
    return pd.DataFrame(rows).assign(n_resamples=n_resamples, confidence=confidence)


def change_consistency(changes: pd.DataFrame) -> pd.DataFrame:
    """Over seeds: `statistic_changes` tables with a `seed` column, one row per task and statistic:
    the seeds, the mean, smallest and largest change, how many seeds' intervals lie above and below
    0, and the reading: `rises` (or `falls`) when every seed's interval lies above (below) 0, else
    `inconclusive` (some seed's interval holds 0, or the seeds disagree)."""
    rows = []
    for key, part in changes.groupby(["task", "statistic"], sort=False):
        task, statistic = key  # type: ignore[misc]  (a two-column groupby: pairs)
        above, below = int((part.change_low > 0).sum()), int((part.change_high < 0).sum())
        seeds = part.seed.nunique()
        reading = RISES if above == seeds else FALLS if below == seeds else INCONCLUSIVE
        rows.append({"task": task, "statistic": statistic, "seeds": seeds, "change_mean": part.change.mean(),
                     "change_min": part.change.min(), "change_max": part.change.max(), "seeds_above_0": above,
                     "seeds_below_0": below, "reading": reading})  # fmt: skip
    return pd.DataFrame(rows)


def input_overlap(tasks: Sequence[Task]) -> pd.DataFrame:
    """Every pair of `tasks`: how many distinct inputs they share and what share of the smaller task's
    inputs that is (country-capital and country-currency ask about the same countries: 1.0)."""
    inputs = {t.name: {x for x, _ in t.pairs} for t in tasks}
    rows = []
    for i, a in enumerate(inputs):
        for b in list(inputs)[i + 1 :]:
            shared = len(inputs[a] & inputs[b])
            rows.append({"task_a": a, "task_b": b, "shared": shared,
                         "share": shared / max(1, min(len(inputs[a]), len(inputs[b])))})  # fmt: skip
    return pd.DataFrame(rows, columns=["task_a", "task_b", "shared", "share"])


def held_out_outputs(
    model: TransformerBridge, tasks: Sequence[Task], n_examples: int, *, instructed: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Greedy outputs of `model` on each task's first `n_examples` held-out pairs, scored by every
    reading (`score_outputs`): (one row of scores per task: n, accuracy and strict with intervals,
    echoes, for label tasks balanced accuracy and the predicted labels; one row per output)."""
    rows, shown = [], []
    for task in tasks:
        held = pattern_subset(task, n_examples)
        inputs, answers = zip(*held.eval_pairs)
        outputs = generations(model, held, instructed=instructed)
        scores, per = score_outputs(held, outputs, inputs, answers, task_labels(held))
        rows.append({"task": task.name, "n": len(outputs), **scores})
        shown.append(pd.DataFrame({"task": task.name, "input": inputs, "answer": answers, "output": outputs, **per}))
    return pd.DataFrame(rows), pd.concat(shown, ignore_index=True)


def run_tables(result: FinetuneResult, *, n_examples: int, seed: int) -> dict[str, pd.DataFrame]:
    """The tables of one SFT run, between its first and last recorded patterns: `table1`
    (`statistics_before_after`, with `n_examples` and `seed` columns), `accuracy` (the run's),
    `change_correlation` (`pattern_correlation` of the changes, Fig. 2) and `dynamics`
    (`pattern_dynamics`, Fig. 5)."""
    before, after = result.patterns[min(result.patterns)], result.patterns[max(result.patterns)]
    if result.accuracy is None:
        raise ValueError("the run recorded no accuracy (FinetuneConfig(accuracy=False)); its tables need it")
    return {
        "table1": statistics_before_after(before, after, n_examples=n_examples, seed=seed),
        "accuracy": result.accuracy,
        "change_correlation": pattern_correlation(pattern_changes(before, after)),
        "dynamics": pattern_dynamics(result, list(before)),
    }
