"""Pattern-guided data selection (the SFT paper's claim 4, Tables 2/3).

A short *probe* SFT of the base model on each task alone gives the task's pattern change (after -
before, on its held-out examples). For each target task, the k candidate tasks whose change
correlates most with the target's (`rank_by_pattern`) are the *selected* training data. The base
model is fine-tuned on them, on k *random* candidates (several draws), on a composite's own two
components (*oracle*), on the target itself (*target*: the only condition with target data) and not
at all (*none*), and the target is evaluated (instructed, held-out examples; the target's data never
enter the compared runs). `data_selection` runs all of it, resumably; `selection_summary` and
`similarity_vs_loss` are its statistics.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._io import atomic_write_text, locked_folder, read_table
from .._validate import check_batch_fits, check_int
from ..analysis import rank_by_pattern
from ..data import Task
from ..evaluation import answer_loss, generations, score_outputs
from ..training import safe_name
from ._finetune import FinetuneConfig, finetune_, pattern_subset, remove_lora_
from ._study import run_changes

CONDITIONS = ("none", "random", "selected", "oracle", "target")
# Loss gaps below this are ties (runs on the same sources).
TIE_NATS = 1e-6
# The paired comparisons of the summary: the first condition's loss minus the second's, per target.
PAIRED = (
    ("selected", "random"),
    ("selected", "none"),
    ("random", "none"),
    ("oracle", "random"),
    ("selected", "oracle"),
)
# Generations kept per run (the first held-out examples).
SHOWN = 10


@dataclass(frozen=True)
class SelectionConfig:
    """One data-selection study: tasks, sizes and the SFT recipe of its runs."""

    model: str
    """The model the study is on (recorded in its settings: a study's folder is not reused for another)."""
    candidates: tuple[str, ...]
    """Candidate (source) tasks; a target is never its own candidate."""
    targets: tuple[str, ...]
    """Target tasks (a composite "a+b" has the oracle condition: its two components)."""
    finetune: FinetuneConfig
    """The SFT recipe of every run (steps, seed, patterns and progress are set per run)."""
    steps: int
    """SFT steps of every compared run."""
    probe_steps: int
    """SFT steps of the probe run of each task alone (its pattern change)."""
    eval_examples: int
    """Held-out examples of the target that are evaluated (the first of its eval split)."""
    pattern_examples: int
    """Held-out examples per task of the probe patterns."""
    train_pairs: int | None = None
    """Training pairs per task (the first), so that no task dominates the pooled data; None: all."""
    k: int = 2
    """Tasks per training set."""
    seeds: int = 2
    """SFT seeds of the selected and oracle sets."""
    draws: int = 3
    """Random draws of k candidates (one seed each)."""
    seed: int = 0
    """Seed of the probe runs and of the random draws."""

    def __post_init__(self) -> None:
        """Names as tuples; sizes and counts at least 1 (seeds at least 0), k below the candidates."""
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "targets", tuple(self.targets))
        for name in ("steps", "probe_steps", "eval_examples", "pattern_examples", "k", "seeds", "draws"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("seed", self.seed, minimum=0)
        if self.train_pairs is not None:
            check_int("train_pairs", self.train_pairs, minimum=1)
        check_int("k", self.k, maximum=max(1, len(self.candidates) - 1))

    def run_config(self, seed: int) -> FinetuneConfig:
        """The recipe of a compared run. `finetune_` always takes patterns at its last step; these
        runs do not use them (one example)."""
        return dataclasses.replace(
            self.finetune, steps=self.steps, seed=seed, pattern_examples=1, accuracy=False, progress=False
        )

    def probe_config(self) -> FinetuneConfig:
        """The recipe of a probe run: patterns before and after, on `pattern_examples` examples."""
        return dataclasses.replace(
            self.finetune,
            steps=self.probe_steps,
            seed=self.seed,
            pattern_steps=(0,),
            pattern_examples=self.pattern_examples,
            accuracy=False,
            progress=False,
        )

    def settings(self, candidates: Sequence[str]) -> dict:
        """What a study's results depend on, as recorded in its folder (`settings.json`)."""
        return {
            "model": self.model,
            "candidates": list(candidates),
            "k": self.k,
            "steps": self.steps,
            "probe": dataclasses.asdict(self.probe_config()),
            "eval_examples": self.eval_examples,
            "train_pairs": self.train_pairs,
            "seed": self.seed,
        }

    def cut(self, task: Task, n_held_out: int) -> Task:
        """`task` with its first `train_pairs` training pairs and `n_held_out` held-out pairs."""
        return pattern_subset(task, n_held_out, n_train=self.train_pairs)


def random_sources(candidates: Sequence[str], k: int, seed: int, target: str, draw: int) -> list[str]:
    """k of `candidates` drawn at random (in their order), the same for a (seed, target, draw) on every
    rerun and machine."""
    rng = np.random.default_rng([seed, zlib.crc32(target.encode()), draw])
    return [candidates[int(i)] for i in sorted(rng.choice(len(candidates), size=k, replace=False))]


def composite_components(name: str) -> list[str]:
    """The basic tasks of a composite task name ("organism/plural+uppercase" -> "organism/plural",
    "organism/uppercase"); a basic task gives itself."""
    prefix, _, tail = name.rpartition("/")
    return [f"{prefix}/{part}" if prefix else part for part in tail.split("+")]


@dataclass(frozen=True)
class SelectionRun:
    """One compared run: fine-tune on `sources` (none: the base model) with `seed`, evaluate `target`."""

    target: str
    condition: str
    seed: int
    sources: tuple[str, ...]


def selection_plan(
    changes: dict[str, Tensor], targets: Sequence[str], candidates: Sequence[str], config: SelectionConfig
) -> tuple[pd.DataFrame, list[SelectionRun]]:
    """The ranking of every target's candidates by pattern-change similarity (plain and centred,
    `rank_by_pattern`) and the runs to compare, per target in this order: none, selected (one per
    seed), random (one per draw), oracle (one per seed, composites whose components are candidates)
    and target."""
    _check_k(config.k, len(candidates))
    return _plan(changes, targets, candidates, config)


def _check_k(k: int, n_candidates: int) -> None:
    if not 0 < k < n_candidates:
        raise ValueError(f"k must lie in [1, {n_candidates - 1}] (one candidate may be the target), got {k}")


def _plan(
    changes: dict[str, Tensor], targets: Sequence[str], candidates: Sequence[str], config: SelectionConfig
) -> tuple[pd.DataFrame, list[SelectionRun]]:
    """`selection_plan` for a `k` checked against the candidates."""
    rankings, runs = [], []
    for target in targets:
        pool = {name: changes[name] for name in candidates if name != target}
        ranking = rank_by_pattern(changes[target], pool)
        centred = rank_by_pattern(changes[target], pool, center=True).set_index("candidate")
        ranking["similarity_centred"] = ranking.candidate.map(centred.similarity)
        ranking["rank_centred"] = ranking.candidate.map(centred["rank"])
        ranking.insert(0, "target", target)
        rankings.append(ranking)
        chosen = tuple(ranking.candidate[: config.k])
        runs.append(SelectionRun(target, "none", 0, ()))
        runs += [SelectionRun(target, "selected", seed, chosen) for seed in range(config.seeds)]
        runs += [
            SelectionRun(target, "random", d, tuple(random_sources(list(pool), config.k, config.seed, target, d)))
            for d in range(config.draws)
        ]
        parts = composite_components(target)
        if len(parts) > 1 and all(p in pool for p in parts):
            runs += [SelectionRun(target, "oracle", seed, tuple(parts)) for seed in range(config.seeds)]
        runs.append(SelectionRun(target, "target", 0, (target,)))
    return pd.concat(rankings, ignore_index=True), runs


@dataclass
class SelectionResult:
    """A data-selection study's tables."""

    ranking: pd.DataFrame
    """Per target and candidate: similarity and rank, plain and centred (`selection_plan`)."""
    runs: pd.DataFrame
    """One row per compared run: target, condition, seed, sources, the sources' mean similarity,
    accuracy, strict, echo, answer loss, n_eval, wall time."""
    generations: pd.DataFrame
    """The first `SHOWN` generations of every run."""


def reloading(model: TransformerBridge) -> Callable[[], TransformerBridge]:
    """A loader that gives `model` back with the weights it has now, and without adapters: for runs
    of fine-tuning one after another on one loaded model (cheaper than loading it again)."""
    initial = [p.detach().clone() for p in model.parameters()]

    def load() -> TransformerBridge:
        remove_lora_(model)
        with torch.no_grad():
            for p, value in zip(model.parameters(), initial):
                p.copy_(value)
        return model

    return load


def data_selection(
    load: Callable[[], TransformerBridge],
    candidates: Sequence[Task],
    targets: Sequence[Task],
    config: SelectionConfig,
    runs_dir: str | os.PathLike,
    *,
    log: Callable[[str], None] | None = None,
) -> SelectionResult:
    """Run a data-selection study: `load()` gives the base model afresh for every run (`reloading`
    for one loaded model). Probe runs go to `runs_dir/probe/<task>/`, finished runs and their first
    generations to `runs_dir/runs.csv` and `generations.csv` after each run (a rerun skips them), and
    the study's settings to `runs_dir/settings.json`: a folder of a study with other settings is
    refused. `runs_dir` is locked while the study runs. `log` gets one line per finished run."""
    names = {t.name for t in candidates}
    if len(names) != len(candidates):
        raise ValueError(f"candidate names must be distinct, got {[t.name for t in candidates]}")
    _check_k(config.k, len(candidates))
    for task in [*candidates, *targets]:  # a probe run trains on one task alone: the fewest pairs of any run
        pairs = config.cut(task, config.pattern_examples).n_train
        check_batch_fits(config.finetune.batch_size, pairs, f"training pairs of {task.name}", "finetune.batch_size")
    runs_dir = Path(runs_dir)
    probe = config.probe_config()
    with locked_folder(runs_dir, "runs_dir"):
        _check_settings(runs_dir / "settings.json", config.settings([t.name for t in candidates]))
        # Pattern change of each task under a probe SFT on that task alone (held-out examples).
        changes = {}
        for task in {t.name: t for t in [*candidates, *targets]}.values():
            result = finetune_(
                load(),
                [config.cut(task, config.pattern_examples)],
                probe,
                out_dir=runs_dir / "probe" / safe_name(task.name),
            )
            changes[task.name] = run_changes(result)[task.name]
        ranking, plan = _plan(changes, [t.name for t in targets], [t.name for t in candidates], config)
        tasks = {t.name: t for t in [*targets, *candidates]}
        done, shown = _read(runs_dir / "runs.csv"), _read(runs_dir / "generations.csv")
        similarity = ranking.set_index(["target", "candidate"]).similarity
        for i, run in enumerate(plan):
            if (
                len(done)
                and ((done.target == run.target) & (done.condition == run.condition) & (done.seed == run.seed)).any()
            ):
                continue
            row, examples = _compare(load, tasks, run, config, similarity)
            done = pd.concat([done, pd.DataFrame([row])], ignore_index=True)
            shown = pd.concat([shown, examples], ignore_index=True)
            atomic_write_text(runs_dir / "generations.csv", shown.to_csv(index=False))
            atomic_write_text(runs_dir / "runs.csv", done.to_csv(index=False))  # last: its generations are in
            if log is not None:
                log(
                    f"[{i + 1}/{len(plan)}] {run.target} {run.condition} seed {run.seed} "
                    f"({' '.join(run.sources) or 'no SFT'}): accuracy {row['accuracy']:.2f}, "
                    f"answer loss {row['answer_loss']:.3f}"
                )
    wanted = pd.DataFrame([{"target": r.target, "condition": r.condition, "seed": r.seed} for r in plan])
    table = wanted.merge(done, on=["target", "condition", "seed"], how="left")
    table["sources"] = table.sources.fillna("")  # no SFT: no sources (read back from the CSV as NaN)
    return SelectionResult(ranking, table, wanted.merge(shown, on=["target", "condition", "seed"]))


def _check_settings(path: Path, settings: dict) -> None:
    if path.is_file() and json.loads(path.read_text()) != json.loads(json.dumps(settings)):
        raise ValueError(f"{path.parent} holds a study with other settings ({path}); use another folder or remove it")
    atomic_write_text(path, json.dumps(settings, indent=1))


def _read(path: Path) -> pd.DataFrame:
    return read_table(path) if path.is_file() else pd.DataFrame()


def _compare(
    load: Callable[[], TransformerBridge],
    tasks: dict[str, Task],
    run: SelectionRun,
    config: SelectionConfig,
    similarity: pd.Series,
) -> tuple[dict, pd.DataFrame]:
    """One compared run: its row of `SelectionResult.runs` and its first generations."""
    start = time.perf_counter()
    model = load()
    target = tasks[run.target]
    if run.sources:
        finetune_(model, [config.cut(tasks[n], 1) for n in run.sources], config.run_config(run.seed))
    held = config.cut(target, config.eval_examples)
    inputs, answers = zip(*held.eval_pairs)
    outputs = generations(model, held, instructed=True)
    scores, _ = score_outputs(held, outputs, inputs, answers)
    candidate = run.condition in ("selected", "random", "oracle")
    row = {
        "target": run.target,
        "condition": run.condition,
        "seed": run.seed,
        "sources": " ".join(run.sources),
        "similarity_mean": float(np.mean([similarity[run.target, n] for n in run.sources])) if candidate else np.nan,
        "accuracy": scores["accuracy"],
        "strict": scores["strict"],
        "echo": scores["echo"],
        "answer_loss": answer_loss(model, held, instructed=True),
        "n_eval": len(answers),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    examples = pd.DataFrame(
        [
            {"target": run.target, "condition": run.condition, "seed": run.seed, "input": x, "answer": a, "output": o}
            for x, a, o in list(zip(inputs, answers, outputs))[:SHOWN]
        ]
    )
    return row, examples


def selection_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per target and condition: n runs, their seeds and sources, mean / SD (n-1) / min / max of
    accuracy and answer loss; then per condition the mean over targets, and for each of `PAIRED` the
    paired difference of the per-target means (first - second: mean, min, max, on how many targets
    the first has the lower loss, ties under `TIE_NATS` left out, and two-sided sign and Wilcoxon
    signed-rank p-values over the targets)."""

    rows = []
    for target, condition in runs[["target", "condition"]].drop_duplicates().itertuples(index=False):
        group = runs[(runs.target == target) & (runs.condition == condition)]
        row = {
            "target": target,
            "condition": condition,
            "n": len(group),
            "seeds": " ".join(map(str, group.seed)),
            "sources": " | ".join(dict.fromkeys(group.sources)),
        }
        for metric in ("accuracy", "answer_loss"):
            values = group[metric]
            row |= {
                f"{metric}_mean": values.mean(),
                f"{metric}_sd": values.std(ddof=1) if len(values) > 1 else np.nan,
                f"{metric}_min": values.min(),
                f"{metric}_max": values.max(),
            }
        rows.append(row)
    summary = pd.DataFrame(rows)
    means = []
    for condition in CONDITIONS:
        part = summary[summary.condition == condition]
        if len(part):
            means.append(
                {
                    "target": f"mean of {len(part)} targets",
                    "condition": condition,
                    "n": int(part.n.sum()),
                    "accuracy_mean": part.accuracy_mean.mean(),
                    "answer_loss_mean": part.answer_loss_mean.mean(),
                }
            )
    loss = summary.pivot(index="target", columns="condition", values="answer_loss_mean")
    acc = summary.pivot(index="target", columns="condition", values="accuracy_mean")
    for a, b in PAIRED:
        if not {a, b} <= set(loss.columns):
            continue
        both = loss[[a, b]].dropna().index
        gap = loss.loc[both, a] - loss.loc[both, b]
        decided = gap[gap.abs() > TIE_NATS]  # the same sources (possible with few candidates) tie
        lower, ties = int((decided < 0).sum()), len(gap) - len(decided)
        means.append(
            {
                "target": f"{a} - {b}, {len(gap)} targets",
                "condition": f"{a} - {b}",
                "n": len(gap),
                "accuracy_mean": (acc.loc[both, a] - acc.loc[both, b]).mean(),
                "answer_loss_mean": gap.mean(),
                "answer_loss_min": gap.min(),
                "answer_loss_max": gap.max(),
                "sources": f"{a} has the lower loss on {lower} of {len(gap)} targets"
                + (f" ({ties} tied)" if ties else ""),
                "p_sign": scipy.stats.binomtest(lower, len(decided)).pvalue if len(decided) else np.nan,
                "p_wilcoxon": scipy.stats.wilcoxon(decided)[1] if len(decided) > 1 else np.nan,  # (statistic, p)
            }
        )
    return pd.concat([summary, pd.DataFrame(means)], ignore_index=True)


def similarity_vs_loss(runs: pd.DataFrame) -> pd.DataFrame:
    """Per target, over its runs on candidate tasks (selected, random, oracle): Spearman's rho between
    the training set's mean pattern-change similarity to the target and the target's answer loss
    (negative: more similar data, lower loss), with its p-value; then the mean rho over targets."""

    rows = []
    for target, group in runs.dropna(subset=["similarity_mean"]).groupby("target", sort=False):
        rho, p = scipy.stats.spearmanr(group.similarity_mean, group.answer_loss)
        rows.append(
            {"target": target, "n_runs": len(group), "n_sets": group.sources.nunique(), "rho": rho, "p_value": p}
        )
    frame = pd.DataFrame(rows)
    if len(frame):
        mean = {"target": f"mean of {len(frame)} targets", "n_runs": frame.n_runs.sum(), "rho": frame.rho.mean()}
        frame = pd.concat([frame, pd.DataFrame([{**mean, "p_value": np.nan}])], ignore_index=True)
    return frame
