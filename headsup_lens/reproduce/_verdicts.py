"""A verdict per claim of the paper, read from a model's result tables (`experiments/smollm2.py verdicts`).

Each claim is judged by one rule on the committed CSVs of one task, stated here and in the
`evidence` column beside the numbers it read, and every verdict carries the training budget of the
mask it judges (`steps`, `batch_size`, `examples` = steps × batch, the paper's `paper_examples`,
`seeds`, `random_draws`), so a results page shows verdicts no one typed:

- **the mask elicits the task** (Tables 1/2): by the strict matcher, the masked 95% interval lies
  above the original's and its upper end reaches the instructed accuracy; on a label task the masked
  outputs must also beat always answering the majority label (exact McNemar test on the strict hits,
  p < 0.05) and their balanced accuracy's 95% bootstrap interval must lie above chance (1 / labels).
  A mask that fails this rule after fewer examples than the paper's schedule shows is **not elicited
  at this budget**, not a failure of the claim: "does not reproduce" needs at least the paper's budget.
  Every seed's mask in the settings table (`masked`, `masked, seed k`) is judged by the rule; the claim
  holds when one of them passes it with its McNemar p (masked vs original) below 0.05 / seeds
  (Bonferroni over the seeds tried), and `eliciting_seeds` counts those that do;
- **the mask, not the number of removed heads** (the random-mask control): with `random_draws` ≥ 2
  (`random_masks_<task>.csv`), no random mask of its per-layer shape scores as many strict hits
  (permutation p = (1 + draws at least as good) / (1 + draws) < 0.05); with the settings table's
  one draw, the random mask's interval lies below the masked one;
- **removal in weight order switches to the target** (Fig. 2, `fig2_switch_rates_<task>.csv`, every
  held-out input): the share of inputs whose answer becomes the top-1 next token while the mask's
  heads are removed one by one is higher in weight order than in random order (exact McNemar test,
  p < 0.05);
- **the masked run approaches the instructed run** (Fig. 4): at the last layer the block output's
  cosine to the instructed run is higher for the masked run than for the original, on the same
  inputs (one-sided Wilcoxon signed-rank test, p < 0.05);
- **scaling the heads outside the mask lowers the instructed loss** (Fig. 6,
  `fig6_alpha_control_<task>.csv`): at α = `alpha_test` (0.25, fixed in advance) the mean drop of the
  instructed answer loss has a 95% bootstrap interval above 0, is at least `MIN_RELATIVE_DROP` of the
  loss at α = 1 (below that it is within the noise of a small model's loss), and its interval lies above
  the drop of every random head set of the same size scaled the same way (a mean drop that only edges
  past a random set's is a tie).

The last four claims are about *how* a mask does the task, so they are judged only where the mask
elicits it ("cannot be tested here" otherwise): the random-mask control for the first eliciting seed
(its own random draws), Figs. 2, 4 and 6 for the seed-0 mask their tables analysed. A claim whose table is missing is "not run". The
p-value beside a verdict is from the test and matcher its rule uses.

`claim_verdicts` judges the masks stored in a model's folder (`masks/<task>.safetensors`, schedule as
trained) and, where the paper's schedule was run (`paper_schedule/<task>/step<N>/<model>/`, the
latest step evaluated), the same claims again at that budget.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import bootstrap, wilcoxon

from ..analysis import AlphaControl, SwitchRates
from ..evaluation import RandomMaskControl, mcnemar_exact
from ..masks import HeadMask
from ..training import TrainConfig, safe_name

REPRODUCES, DOES_NOT, UNTESTABLE, NOT_RUN = "reproduces", "does not reproduce", "cannot be tested here", "not run"
NOT_AT_BUDGET = "not elicited at this budget"
VERDICTS = (REPRODUCES, DOES_NOT, NOT_AT_BUDGET, UNTESTABLE, NOT_RUN)
CLAIMS = {
    "elicits": "A mask learned without instruction makes the model do the task (Tables 1/2)",
    "random": "The mask, not the number of removed heads, does it (random-mask control)",
    "fig2": "Removing heads in order of the mask's weights switches the output to the target (Fig. 2)",
    "fig4": "The masked run's representations approach the instructed run's (Fig. 4)",
    "fig6": "Scaling the heads outside the mask lowers the instructed loss (Fig. 6)",
}
ALPHA = 0.05  # the level of every test a rule runs
MIN_RELATIVE_DROP = 0.05  # Fig. 6: a drop below 5% of the loss counts as no drop
BUDGET_COLUMNS = ("schedule", "steps", "batch_size", "examples", "paper_examples", "seeds", "random_draws")
ANALYSED_SEED = 0  # the seed whose mask the sweeps, similarity and α tables (Figs. 2, 4, 6) analyse
PAPER = TrainConfig()  # the paper's schedule (Sec. 3.2): its examples are the budget a "does not reproduce" needs
FAST = TrainConfig.fast()


@dataclass(frozen=True)
class Verdict:
    """One rule's answer: the verdict, the numbers it read, its test's p-value and matcher (NaN and
    None where no test ran: empty cells in the CSV)."""

    verdict: str
    evidence: str
    p: float = math.nan
    matcher: str | None = None


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
        for name, config in (("paper", PAPER), ("fast", FAST)):
            if (self.steps, self.batch_size) == (config.steps, config.batch_size):
                return name
        return f"{self.steps}×{self.batch_size}"


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


# ---------------------------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class _Run:
    """The tables of one mask of one task: where they are and what they are called there."""

    task: str
    folder: Path
    mask: Path
    seeds: int

    def path(self, artifact: str) -> Path | None:
        """`<artifact>_<task>.csv` (a model's folder) or `<artifact>.csv` (a single-task folder), also gzipped."""
        stem = safe_name(self.task)
        for name in (f"{artifact}_{stem}", artifact):
            for suffix in (".csv", ".csv.gz"):
                if (self.folder / f"{name}{suffix}").is_file():
                    return self.folder / f"{name}{suffix}"
        return None

    def read(self, artifact: str) -> pd.DataFrame | None:
        path = self.path(artifact)
        if path is None:
            return None
        text = {"input": str, "answer": str, "output": str, "setting": str, "gold_label": str, "predicted_label": str}
        return pd.read_csv(path, keep_default_na=False, na_values=[""], dtype=text)


def _runs(folder: Path, task: str) -> list[_Run]:
    stem = safe_name(task)
    seeds = 1 + len(list((folder / "masks").glob(f"{stem}_seed*.safetensors")))
    runs = [_Run(task, folder, folder / "masks" / f"{stem}.safetensors", seeds)]
    schedule = folder / "paper_schedule" / task
    evaluated = sorted(schedule.glob("step*/*/tables12_evaluation*.csv"), key=lambda p: int(p.parts[-3][4:]))
    if evaluated:
        last = evaluated[-1].parent
        step = last.parent.name
        runs.append(_Run(task, last, schedule / "step_masks" / step / f"{stem}.safetensors", 1))
    return runs


# ---------------------------------------------------------------------------------------------- verdicts
def claim_verdicts(folder: str | os.PathLike, tasks: list[str]) -> pd.DataFrame:
    """One row per task, schedule and claim (`CLAIMS`): `task`, the budget (`BUDGET_COLUMNS`),
    `eliciting_seeds` (how many seeds' masks pass the elicitation rule), `claim` (its key), `statement`, `verdict` (`VERDICTS`), `evidence` (the numbers the rule read),
    `p_value` and `matcher` (of the rule's test), from the tables `experiments/smollm2.py` writes
    into `folder`."""
    rows = []
    for task in tasks:
        for run in _runs(Path(folder), task):
            budget = mask_budget(run.mask)
            found, eliciting = _judge_run(run, budget)
            draws = run.read(_draws_artifact(eliciting[0] if eliciting else ANALYSED_SEED))
            n_draws = int((draws["mask"] == "random").sum()) if draws is not None else 1
            for claim, verdict in found.items():
                rows.append(
                    {
                        "task": task,
                        "schedule": budget.schedule,
                        "steps": budget.steps,
                        "batch_size": budget.batch_size,
                        "examples": budget.examples,
                        "paper_examples": PAPER.steps * PAPER.batch_size,
                        "seeds": run.seeds,
                        "random_draws": n_draws,
                        "eliciting_seeds": len(eliciting),
                        "claim": claim,
                        "statement": CLAIMS[claim],
                        "verdict": verdict.verdict,
                        "evidence": verdict.evidence,
                        "p_value": verdict.p,
                        "matcher": verdict.matcher,
                    }
                )
    return pd.DataFrame(rows)


def eliciting_seeds(folder: str | os.PathLike, task: str) -> list[int]:
    """The seeds whose stored masks of `task` (in a model's `folder`, the schedule as trained) elicit
    it by the verdicts' rule; none where the settings table is missing."""
    run = _runs(Path(folder), task)[0]
    table, texts = run.read("tables12_evaluation"), run.read("tables12_generations")
    if table is None or texts is None:
        return []
    return _elicits(table, texts, mask_budget(run.mask))[1]


def _judge_run(run: _Run, budget: Budget) -> tuple[dict[str, Verdict], list[int]]:
    """Every claim's verdict on one run, and the seeds whose masks elicit the task."""
    table, texts = run.read("tables12_evaluation"), run.read("tables12_generations")
    if table is None or texts is None:
        elicits, eliciting = Verdict(NOT_RUN, "no tables12_evaluation / tables12_generations"), []
    else:
        elicits, eliciting = _elicits(table, texts, budget)
    control = _random_control(run, table, eliciting[0] if eliciting else ANALYSED_SEED)
    return {
        "elicits": elicits,
        "random": _gated(elicits, control),
        "fig2": _analysed(elicits, eliciting, _with(run, "fig2_switch_rates", _fig2)),
        "fig4": _analysed(elicits, eliciting, _with(run, "fig4_similarity", _fig4)),
        "fig6": _analysed(elicits, eliciting, _with(run, "fig6_alpha_control", _fig6)),
    }, eliciting


def _with(run: _Run, artifact: str, rule: Callable[[pd.DataFrame, str], Verdict]) -> Verdict:
    frame = run.read(artifact)
    return rule(frame, run.task) if frame is not None else Verdict(NOT_RUN, f"no {artifact}_{safe_name(run.task)}.csv")


def _gated(elicits: Verdict, verdict: Verdict) -> Verdict:
    """A claim about *how* the mask does the task is testable only where it does the task (whether or
    not its control was run); where the settings table itself is missing, nothing was run."""
    if elicits.verdict == REPRODUCES:
        return verdict
    if elicits.verdict == NOT_RUN:
        return Verdict(NOT_RUN, elicits.evidence)
    return Verdict(UNTESTABLE, "the mask does not elicit the task")


def _analysed(elicits: Verdict, eliciting: list[int], verdict: Verdict) -> Verdict:
    """`_gated` for a claim judged on the tables of the analysed mask (seed `ANALYSED_SEED`): where only
    another seed's mask elicits the task, the analyses of that mask were not run."""
    if elicits.verdict == REPRODUCES and ANALYSED_SEED not in eliciting:
        seeds = ", ".join(map(str, eliciting))
        return Verdict(
            UNTESTABLE, f"the analysed mask (seed {ANALYSED_SEED}) does not elicit the task; seed {seeds}'s does"
        )
    return _gated(elicits, verdict)


def _seeds(table: pd.DataFrame) -> dict[int, str]:
    """Seed -> the settings-table row of its mask: `masked` (seed 0) and `masked, seed k`."""
    found = {ANALYSED_SEED: "masked"} if "masked" in set(table.setting) else {}
    for setting in table.setting:
        match = re.fullmatch(r"masked, seed (\d+)", str(setting))
        if match:
            found[int(match.group(1))] = setting
    return dict(sorted(found.items()))


def _draws_artifact(seed: int) -> str:
    """The random masks drawn to the shape of seed `seed`'s mask (`smollm2.py controls --seed k`)."""
    return "random_masks" if seed == ANALYSED_SEED else f"random_masks_seed{seed}"


def _random_setting(seed: int) -> str:
    return "random mask" if seed == ANALYSED_SEED else f"random mask, seed {seed}"


def _row(table: pd.DataFrame, setting: str) -> pd.Series:
    return table.loc[table.setting == setting].iloc[0]


def _hits(texts: pd.DataFrame, setting: str, column: str = "strict") -> list[bool]:
    part = texts.loc[texts.setting == setting].sort_values("example", kind="mergesort")
    return part[column].astype(str).str.lower().eq("true").tolist()


def _ci(row: pd.Series) -> str:
    return f"{row.strict:.2f} [{row.strict_low:.2f}, {row.strict_high:.2f}]"


def _elicits(table: pd.DataFrame, texts: pd.DataFrame, budget: Budget) -> tuple[Verdict, list[int]]:
    """The elicitation rule on every seed's mask (`_seeds`); the evidence is the first eliciting seed's
    (seed 0's when none elicits), and the seeds that elicit the task."""
    judged = {seed: _elicits_seed(table, texts, setting) for seed, setting in _seeds(table).items()}
    level = ALPHA / len(judged)  # Bonferroni: more seeds tried, more chances of one lucky mask
    eliciting = [seed for seed, (holds, _, p) in judged.items() if holds and p < level]
    shown = eliciting[0] if eliciting else next(iter(judged))
    _, evidence, p = judged[shown]
    if len(judged) > 1:
        named = f" (seed {', '.join(map(str, eliciting))}, p < {level:.3g})" if eliciting else ""
        evidence = f"seed {shown}: {evidence}; {len(eliciting)} of {len(judged)} seeds' masks elicit it{named}"
    if eliciting:
        return Verdict(REPRODUCES, evidence, p, "strict"), eliciting
    if budget.examples >= PAPER.steps * PAPER.batch_size:
        return Verdict(DOES_NOT, evidence, p, "strict"), []
    evidence += f"; {budget.examples:,} training examples, the paper's {PAPER.steps * PAPER.batch_size:,}"
    return Verdict(NOT_AT_BUDGET, evidence, p, "strict"), []


def _elicits_seed(table: pd.DataFrame, texts: pd.DataFrame, setting: str) -> tuple[bool, str, float]:
    """One mask (`setting`): whether it passes the rule, the numbers read and its McNemar p vs the original."""
    masked, original, instructed = (_row(table, s) for s in (setting, "original", "instructed"))
    p = mcnemar_exact(_hits(texts, setting), _hits(texts, "original"))
    above = masked.strict_low > original.strict_high
    reaches = masked.strict_high >= instructed.strict
    evidence = f"strict: masked {_ci(masked)}, original {_ci(original)}, instructed {_ci(instructed)} (p = {p:.2g})"
    holds = bool(above and reaches)
    if "majority label" in set(table.setting) and "gold_label" in texts:
        label_holds, label_evidence = _beats_majority(table, texts, setting)
        holds, evidence = holds and label_holds, f"{evidence}; {label_evidence}"
    return holds, evidence, float(p)


def _beats_majority(table: pd.DataFrame, texts: pd.DataFrame, setting: str) -> tuple[bool, str]:
    """A label task: the masked outputs (`setting`) beat always answering the majority label (McNemar on
    the strict hits) and their balanced accuracy's bootstrap interval lies above chance."""
    masked, majority = _hits(texts, setting), _hits(texts, "majority label")
    p = mcnemar_exact(masked, majority)
    part = texts.loc[texts.setting == setting].sort_values("example", kind="mergesort")
    gold, predicted = part.gold_label.to_numpy(), part.predicted_label.to_numpy()
    labels = sorted(set(gold))
    chance = 1 / len(labels)

    def balanced(index: np.ndarray) -> float:
        g, q = gold[index], predicted[index]
        return float(np.mean([np.mean(q[g == label] == label) for label in labels if (g == label).any()]))

    value = balanced(np.arange(len(gold)))
    low = bootstrap(
        (np.arange(len(gold)),),
        balanced,
        n_resamples=2000,
        method="percentile",
        vectorized=False,
        rng=np.random.default_rng(0),
    ).confidence_interval.low
    better = sum(masked) > sum(majority) and p < ALPHA
    evidence = (
        f"majority label strict {_row(table, 'majority label').strict:.2f} (masked vs majority p = {p:.2g}), "
        f"balanced accuracy {value:.2f} [95% low {low:.2f}], chance {chance:.2f}"
    )
    return bool(better and low > chance), evidence


def _random_control(run: _Run, table: pd.DataFrame | None, seed: int) -> Verdict:
    """The control of seed `seed`'s mask: the random masks drawn to its shape (`random_masks_<task>.csv`
    for seed 0, `random_masks_seed<k>_<task>.csv` for seed k) or the settings table's one draw."""
    draws = run.read(_draws_artifact(seed))
    prefix = "" if seed == ANALYSED_SEED else f"seed {seed}: "
    if draws is not None and int((draws["mask"] == "random").sum()) >= 2:
        within = str(draws.within.iloc[0])
        control = RandomMaskControl(task=run.task, within=within, draws=draws, generations=pd.DataFrame())
        row = control.summary(("strict",)).iloc[0]
        evidence = prefix + (
            f"strict: masked {row.learned:.2f}, {row.n_draws} random masks of its per-{row.within} shape "
            f"mean {row.random_mean:.2f} [95% range {row.random_low:.2f}, {row.random_high:.2f}], "
            f"{row.at_least} as good"
        )
        return Verdict(REPRODUCES if row.p < ALPHA else DOES_NOT, evidence, float(row.p), "strict")
    setting = _random_setting(seed)
    if table is None or setting not in set(table.setting) or seed not in _seeds(table):
        return Verdict(NOT_RUN, "no random mask evaluated")
    masked, shuffled = _row(table, _seeds(table)[seed]), _row(table, setting)
    evidence = f"{prefix}strict: one random mask {_ci(shuffled)}, masked {_ci(masked)}"
    return Verdict(REPRODUCES if shuffled.strict_high < masked.strict_low else DOES_NOT, evidence, matcher="strict")


def _fig2(table: pd.DataFrame, task: str) -> Verdict:
    summary = SwitchRates(task=task, table=table).summary().set_index("order")
    weight, shuffled = summary.loc["weight"], summary.loc["random"]
    p = float(weight.p_weight_vs_random)
    evidence = (
        f"answer top-1 while heads are removed: weight order {weight.switched}/{weight.n} inputs "
        f"({weight.rate:.2f} [{weight.low:.2f}, {weight.high:.2f}]), random order {shuffled.switched}/{shuffled.n} "
        f"({shuffled.rate:.2f} [{shuffled.low:.2f}, {shuffled.high:.2f}])"
    )
    holds = weight.rate > shuffled.rate and p < ALPHA
    return Verdict(REPRODUCES if holds else DOES_NOT, evidence, p, "top-1 token")


def _fig4(similarity: pd.DataFrame, task: str) -> Verdict:
    last = similarity[similarity.layer == similarity.layer.max()]
    key = "example" if "example" in last else "input"  # the inputs pair the comparisons (older tables name them)
    by = last.pivot_table(index=key, columns="comparison", values="block_out")
    masked, original = by["masked vs instructed"], by["original vs instructed"]
    test: Any = wilcoxon(masked, original, alternative="greater") if len(by) > 1 else None  # scipy's result object
    p = float(test.pvalue) if test is not None else math.nan
    evidence = (
        f"last layer's block output, cosine to the instructed run: masked {masked.mean():.3f}, "
        f"original {original.mean():.3f} ({len(by)} inputs)"
    )
    return Verdict(REPRODUCES if masked.mean() > original.mean() and p < ALPHA else DOES_NOT, evidence, p, "cosine")


def _fig6(table: pd.DataFrame, task: str) -> Verdict:
    control = AlphaControl(
        task=task, alpha_test=float(table.alpha_test.iloc[0]), n_scaled=int(table.n_scaled.iloc[0]), table=table
    )
    summary = control.summary()
    own = summary.loc[summary.head_set == "outside the mask"].iloc[0]
    random = summary.loc[summary.head_set != "outside the mask"]
    beats = bool((own.loss_drop_low > random.loss_drop).all()) if len(random) else False
    evidence = (
        f"instructed loss {own.loss_at_1:.3f} at α 1.0, {own.loss_at_test:.3f} at α {own.alpha_test:g}: drop "
        f"{own.loss_drop:.3f} [{own.loss_drop_low:.3f}, {own.loss_drop_high:.3f}] ({own.relative_drop:.0%}); "
        f"{len(random)} random sets of {own.n_scaled} heads: drop up to {random.loss_drop.max():.3f}; "
        f"lowest {own.best_loss:.3f} at α {own.best_alpha:.1f}"
    )
    holds = own.loss_drop_low > 0 and own.relative_drop >= MIN_RELATIVE_DROP and beats
    return Verdict(REPRODUCES if holds else DOES_NOT, evidence, matcher="answer loss")
