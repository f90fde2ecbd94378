"""The SFT activation-pattern paper's experiments (Zhao, Du et al.) on the organism and on SmolLM2.

    python experiments/sft_patterns.py organism   # base organism -> instruction SFT on every task + composites
    python experiments/sft_patterns.py smollm2    # LoRA SFT of SmolLM2-135M-Instruct on function-vector tasks
    python experiments/sft_patterns.py select     # pattern-guided data selection (Tables 2/3), --model organism|smollm2
    python experiments/sft_patterns.py grouping   # Fig. 2's grouping test again, from a stored correlation matrix

Each stage fine-tunes with `hl.finetune_` (run folder with checkpoints under `--runs`, git-ignored:
a rerun resumes), takes activation patterns (`activation_pattern`, total derivative of the answer
loss w.r.t. each head's attention probabilities, held-out examples) before, along and after the
run, and writes to `<out>/`:
- `sft_table1.csv`: Gini, CV (population SD) and Pearson kurtosis per task, before -> after (Table 1);
- `sft_fig2_change_correlation.csv/.html/.png`: correlations between tasks' pattern changes (Fig. 2);
- `sft_fig5_dynamics.csv/.html/.png`: correlation and MSE to the final pattern vs step, and accuracy (Fig. 5);
- `sft_accuracy.csv`: greedy accuracy on the pattern examples at every pattern step;
- organism: `sft_composition.csv`: least-squares fit of a composite task's pattern change from its
  two basic tasks' changes (Eq. 3), R² against a shuffled-heads baseline;
- smollm2: `sft_fig2_grouping.csv`: whether related tasks (`SMOLLM2_GROUPS`) have the more similar
  pattern changes: mean correlation inside vs across the groups, exact permutation p-value
  (`grouping_test`); the `grouping` stage recomputes it from `sft_fig2_change_correlation.csv`;
- smollm2: `sft_final_scores.csv` and `sft_generations.csv`: the fine-tuned model's outputs on the
  pattern examples, scored by the paper's matcher and strictly, with echoes and label distributions;
- smollm2: `sft_mask_overlap.csv`: the k heads with the largest pattern change vs the k heads the
  learned Heads-up mask of the same task removes (`masks/<task>.safetensors`), hypergeometric p.
Wall times are appended to `<out>/sft_times.csv`.

`select` (claim 4, Tables 2/3): a short *probe* SFT of the base model on each task alone gives the
task's pattern change (after - before, on its held-out examples); for each target task the k
candidate tasks whose change correlates most with the target's (`rank_by_pattern`) are the
"selected" training data. The base model is fine-tuned on them, on k random candidates (several
draws), on the composite's own two components ("oracle", organism composites), on the target itself
(a reference: the only condition with target data) and not at all, and the target is evaluated
(instructed, held-out words; the target's data never enter the compared runs). Writes
`sft_data_selection.csv` (per target and condition: n, seeds, mean, SD, min, max of accuracy and
answer loss), `sft_data_selection_runs.csv` (one row per run), `sft_data_selection_ranking.csv`
(every candidate's similarity, plain and centred), `sft_data_selection_similarity.csv` (per target,
Spearman's rho between a training set's similarity and the target's loss), `sft_data_selection_generations.csv`
(the first generations of every run) and `sft_data_selection.{html,png}`. Resumable: probe runs and finished
runs are kept under `<runs>/<model>_sft_selection/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import headsup_lens as hl
from headsup_lens._io import atomic_write_text
from headsup_lens.analysis import (
    fit_pattern_change,
    grouping_test,
    head_overlap,
    pattern_correlation,
    pattern_statistics,
    pattern_trajectory,
    rank_by_pattern,
    shuffled_fit_r2,
    top_heads,
)
from headsup_lens.organism import TASK_NAMES
from headsup_lens.plots import save_figure
from headsup_lens.sft import FinetuneConfig, finetune_, pattern_subset
from headsup_lens.training import safe_name

ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["organism", "smollm2", "select", "grouping"])
    p.add_argument("--out", default=None, help="output folder (default: figures/<stage>)")
    p.add_argument("--runs", default=str(ROOT / "runs"), help="run folders (default: runs/, git-ignored)")
    p.add_argument(
        "--base",
        default=str(ROOT / "runs" / "organism_base"),
        help="organism stage: the base organism (trained here when missing: OrganismConfig.base)",
    )
    p.add_argument("--tasks", nargs="+", default=None, help="smollm2 stage: function-vector tasks")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument(
        "--masks",
        default=None,
        help="smollm2 stage: folder of the Heads-up masks <task>.safetensors (default: <out>/masks)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", choices=sorted(SELECTION), default="organism", help="select stage: the model")
    p.add_argument(
        "--targets",
        nargs="+",
        default=None,
        help="select stage: target tasks (organism: 'a+b' is a composite task; default: see SELECTION)",
    )
    p.add_argument("--candidates", nargs="+", default=None, help="select stage: candidate (source) tasks")
    p.add_argument("--k", type=int, default=2, help="select stage: tasks per training set (default 2)")
    p.add_argument("--seeds", type=int, default=2, help="select stage: SFT seeds of the selected and oracle sets")
    p.add_argument("--draws", type=int, default=3, help="select stage: random draws of k candidates (one seed each)")
    p.add_argument("--probe-steps", type=int, default=None, help="select stage: steps of each task's probe SFT")
    p.add_argument("--eval-examples", type=int, default=None, help="select stage: held-out target examples evaluated")
    p.add_argument(
        "--pattern-examples", type=int, default=None, help="select stage: held-out examples per probe pattern"
    )
    p.add_argument("--train-pairs", type=int, default=None, help="select stage: training pairs per task (the first)")
    p.add_argument("--no-png", action="store_true")
    return p


# The base organism's recipe: OrganismConfig.base() with a shorter schedule (CPU time).
BASE_RECIPE = {"steps": 500, "batch_size": 32, "warmup_steps": 50, "checkpoint_every": 100}
COMPOSITES = (("plural", "uppercase"), ("reverse", "uppercase"))
# Three pairs of related tasks (lexical, factual recall, text classification), so that Fig. 2 can
# show whether pattern changes group related tasks; four of them have a learned Heads-up mask.
SMOLLM2_TASKS = ("antonym", "synonym", "country-capital", "country-currency", "sentiment", "ag_news")
SMOLLM2_GROUPS = (("antonym", "synonym"), ("country-capital", "country-currency"), ("sentiment", "ag_news"))
SMOLLM2_PATTERN_STEPS = (0, 5, 10, 20, 50, 100, 200, 300)


@dataclass(frozen=True)
class Selection:
    """Defaults of the `select` stage for one model."""

    candidates: tuple[str, ...]
    targets: tuple[str, ...]
    steps: int
    """SFT steps of every compared run."""
    probe_steps: int
    """SFT steps of the probe run of each task alone (its pattern change)."""
    eval_examples: int
    """Held-out examples of the target that are evaluated (the first of its eval split)."""
    pattern_examples: int
    """Held-out examples per task of the probe patterns."""
    train_pairs: int | None
    """Training pairs per task (the first), so that no task dominates the pooled data; None: all."""


# Organism: every basic task is a candidate; targets are four composites (their two components are
# candidates: the "oracle" choice) and every basic task (the other seven are its candidates).
SELECTION = {
    "organism": Selection(
        candidates=TASK_NAMES,
        targets=("plural+uppercase", "reverse+uppercase", "plural+reverse", "capitalize+reverse", *TASK_NAMES),
        steps=40,
        probe_steps=30,
        eval_examples=100,
        pattern_examples=32,
        train_pairs=None,
    ),
    # SmolLM2: each target has candidates of the same kind (antonym: synonym; country-capital:
    # country-currency, landmark-country; capitalize_first_letter: capitalize, lowercase_first_letter).
    "smollm2": Selection(
        candidates=(
            "synonym",
            "present-past",
            "singular-plural",
            "country-currency",
            "landmark-country",
            "capitalize",
            "lowercase_first_letter",
            "english-french",
        ),
        targets=("antonym", "country-capital", "capitalize_first_letter"),
        steps=50,
        probe_steps=20,
        eval_examples=50,
        pattern_examples=16,
        train_pairs=200,
    ),
}


def _changes(before: dict, after: dict) -> dict:
    return {name: after[name] - before[name] for name in before}


def _table1(before: dict, after: dict, n_examples: int, seed: int) -> pd.DataFrame:
    a, b = pattern_statistics(before).set_index("pattern"), pattern_statistics(after).set_index("pattern")
    rows = []
    for name in a.index:
        rows.append(
            {
                "task": name,
                **{f"{k}_before": a.loc[name, k] for k in ("gini", "cv", "kurtosis")},
                **{f"{k}_after": b.loc[name, k] for k in ("gini", "cv", "kurtosis")},
                "n_examples": n_examples,
                "seed": seed,
            }
        )
    table = pd.DataFrame(rows)
    mean = {"task": "mean", **table.drop(columns=["task"]).mean().to_dict()}
    return pd.concat([table, pd.DataFrame([mean])], ignore_index=True)


def _write(out: Path, name: str, frame: pd.DataFrame, index: bool = False) -> None:
    atomic_write_text(out / name, frame.to_csv(index=index))


def _figures(out: Path, result, tasks: list[str], png: bool) -> None:
    import plotly.express as px
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    steps = sorted(result.patterns)
    before, after = result.patterns[steps[0]], result.patterns[steps[-1]]
    corr = pattern_correlation(_changes(before, after))
    _write(out, "sft_fig2_change_correlation.csv", corr, index=True)
    heat = go.Figure(
        go.Heatmap(
            z=corr.values,
            x=list(corr.columns),
            y=list(corr.index),
            zmin=-1,
            zmax=1,
            colorscale="RdBu",
            text=np.round(corr.values, 2),
            texttemplate="%{text}",
        )
    )
    heat.update_layout(title="Correlation of pattern changes (after SFT - before)", width=700, height=650)
    save_figure(heat, out / "sft_fig2_change_correlation", png=png)

    rows = []
    for task in tasks:
        trajectory = pattern_trajectory({s: result.patterns[s][task] for s in steps})
        trajectory.insert(0, "task", task)
        rows.append(trajectory)
    dynamics = pd.concat(rows, ignore_index=True)
    if result.accuracy is not None:
        dynamics = dynamics.merge(result.accuracy, on=["step", "task"], how="left")
    _write(out, "sft_fig5_dynamics.csv", dynamics)
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("correlation to final pattern", "MSE to final pattern", "accuracy (held-out examples)"),
    )
    palette = px.colors.qualitative.Dark24
    for i, task in enumerate(tasks):
        d = dynamics[dynamics.task == task]
        for col, key in enumerate(("correlation", "mse", "accuracy"), start=1):
            if key in d:
                fig.add_trace(
                    go.Scatter(
                        x=d.step,
                        y=d[key],
                        name=task,
                        legendgroup=task,
                        showlegend=col == 1,
                        mode="lines+markers",
                        line_color=palette[i % len(palette)],
                    ),
                    row=1,
                    col=col,
                )
    fig.update_xaxes(title_text="SFT step")
    fig.update_layout(width=1400, height=480, title="Activation patterns along SFT")
    save_figure(fig, out / "sft_fig5_dynamics", png=png)


def _final_outputs(out: Path, model, tasks, n_examples: int, instructed: bool) -> pd.DataFrame:
    """Greedy outputs of the fine-tuned model on each task's pattern examples, scored by every reading
    (`sft_generations.csv`); returns one row of scores per task (accuracy and strict with intervals,
    echoes, and for label tasks balanced accuracy and the predicted labels)."""
    from headsup_lens.evaluation import generations, score_outputs, task_labels

    rows, shown = [], []
    for task in tasks:
        held = pattern_subset(task, n_examples)
        inputs, answers = zip(*held.eval_pairs)
        outputs = generations(model, held, instructed=instructed)
        scores, per = score_outputs(held, outputs, inputs, answers, task_labels(held))
        rows.append({"task": task.name, "n": len(outputs), **scores})
        shown.append(pd.DataFrame({"task": task.name, "input": inputs, "answer": answers, "output": outputs, **per}))
    _write(out, "sft_generations.csv", pd.concat(shown, ignore_index=True))
    return pd.DataFrame(rows)


def _times(out: Path, stage: str, seconds: float, extra: dict) -> None:
    path = out / "sft_times.csv"
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    row = pd.DataFrame(
        [
            {
                "stage": stage,
                "wall_s": round(seconds, 1),
                "threads": torch.get_num_threads(),
                "settings": json.dumps(extra),
            }
        ]
    )
    _write(out, "sft_times.csv", pd.concat([old, row], ignore_index=True))


def _base_organism(args) -> Path:
    """The base organism's folder, trained first (OrganismConfig.base, BASE_RECIPE) when missing."""
    from headsup_lens.organism import OrganismConfig, train_organism

    base_dir = Path(args.base)
    if not (base_dir / "model.safetensors").is_file():
        train_organism(OrganismConfig.base(**BASE_RECIPE, threads=args.threads), base_dir, progress=True)
    return base_dir


def organism(args) -> None:

    out = Path(args.out or ROOT / "figures" / "organism")
    start = time.perf_counter()
    model = hl.load_model(str(_base_organism(args)), dtype="float32")
    tasks = [hl.load_task(f"organism/{n}") for n in TASK_NAMES] + [
        hl.load_task(f"organism/{a}+{b}") for a, b in COMPOSITES
    ]
    steps = args.steps or 200
    config = FinetuneConfig(
        steps=steps,
        batch_size=16,
        lr=1e-3,
        seed=args.seed,
        pattern_steps=tuple(s for s in (0, 10, 25, 50, 100) if s <= steps),
        pattern_examples=32,
        checkpoint_every=50,
    )
    result = finetune_(model, tasks, config, out_dir=Path(args.runs) / f"organism_sft_seed{args.seed}")
    names = [t.name for t in tasks]
    steps = sorted(result.patterns)
    before, after = result.patterns[steps[0]], result.patterns[steps[-1]]
    _write(out, "sft_table1.csv", _table1(before, after, config.pattern_examples, args.seed))
    _write(out, "sft_accuracy.csv", result.accuracy)
    _figures(out, result, names, not args.no_png)
    change = _changes(before, after)
    rows = []
    for a, b in COMPOSITES:
        target = f"organism/{a}+{b}"
        components = {f"organism/{a}": change[f"organism/{a}"], f"organism/{b}": change[f"organism/{b}"]}
        fit = fit_pattern_change(change[target], components)
        chance = shuffled_fit_r2(change[target], components, n=1000, seed=args.seed)
        others = [n for n in names if n not in (target, *components) and "+" not in n]
        # Another control: the two basic tasks replaced by every other pair of basic tasks.
        pair_r2 = [
            fit_pattern_change(change[target], {x: change[x], y: change[y]}).r2
            for i, x in enumerate(others)
            for y in others[i + 1 :]
        ]
        rows.append(
            {
                "composite": target,
                "r2": fit.r2,
                **{f"weight_{k.removeprefix('organism/')}": v for k, v in fit.coefficients.items()},
                "shuffled_r2_mean": chance.mean(),
                "shuffled_r2_p95": np.quantile(chance, 0.95),
                "shuffled_p": float((chance >= fit.r2).mean()),
                "other_pairs_r2_max": max(pair_r2),
                "other_pairs_r2_mean": float(np.mean(pair_r2)),
                "n_heads": change[target].numel(),
                "seed": args.seed,
            }
        )
    _write(out, "sft_composition.csv", pd.DataFrame(rows))
    _times(
        out,
        "organism",
        time.perf_counter() - start,
        {**{k: v for k, v in vars(config).items() if k in ("steps", "batch_size", "lr", "method")}},
    )


def _grouping(out: Path, corr: pd.DataFrame) -> None:
    """`sft_fig2_grouping.csv`: the grouping test of `SMOLLM2_GROUPS` restricted to the tasks of `corr`
    (tasks of no group stand alone); nothing when no group has two of them."""
    names = list(corr.index)
    groups = [[t for t in group if t in names] for group in SMOLLM2_GROUPS]
    groups = [g for g in groups if g] + [[t] for t in names if not any(t in g for g in SMOLLM2_GROUPS)]
    if all(len(g) < 2 for g in groups):
        return
    result = grouping_test(corr, groups)
    _write(
        out,
        "sft_fig2_grouping.csv",
        pd.DataFrame([{"groups": " | ".join("+".join(g) for g in groups), **dataclasses.asdict(result)}]),
    )


def grouping(args) -> None:
    out = Path(args.out or ROOT / "figures" / "smollm2")
    _grouping(out, pd.read_csv(out / "sft_fig2_change_correlation.csv", index_col=0))


def smollm2(args) -> None:
    from headsup_lens.masks import HeadMask

    out = Path(args.out or ROOT / "figures" / "smollm2")
    start = time.perf_counter()
    model = hl.load_model("smollm2", dtype="float32")
    names = args.tasks or list(SMOLLM2_TASKS)
    tasks = [hl.load_task(n) for n in names]
    # Bare inputs: the setting of the Heads-up masks of the same tasks (and little accuracy before SFT).
    steps = args.steps or 200
    config = FinetuneConfig.lora(
        steps=steps,
        batch_size=8,
        seed=args.seed,
        instructed=False,
        pattern_steps=tuple(s for s in SMOLLM2_PATTERN_STEPS if s <= steps),
        pattern_examples=16,
        checkpoint_every=25,
    )
    result = finetune_(model, tasks, config, out_dir=Path(args.runs) / f"smollm2_sft_seed{args.seed}")
    steps = sorted(result.patterns)
    before, after = result.patterns[steps[0]], result.patterns[steps[-1]]
    _write(out, "sft_table1.csv", _table1(before, after, config.pattern_examples, args.seed))
    _write(out, "sft_accuracy.csv", result.accuracy)
    _write(out, "sft_final_scores.csv", _final_outputs(out, model, tasks, config.pattern_examples, config.instructed))
    _figures(out, result, names, not args.no_png)
    _grouping(out, pd.read_csv(out / "sft_fig2_change_correlation.csv", index_col=0))
    rows = []
    for name, change in _changes(before, after).items():
        path = Path(args.masks or out / "masks") / f"{safe_name(name)}.safetensors"
        if not path.is_file():
            continue
        mask = HeadMask.load(path)
        removed = (mask.values == 0).float()
        k = int(removed.sum())
        for kind, score in (("|change|", change.abs()), ("increase", change)):
            overlap = head_overlap(top_heads(score, k), removed)
            rows.append(
                {
                    "task": name,
                    "score": kind,
                    "k": k,
                    "overlap": overlap.overlap,
                    "expected": overlap.expected,
                    "p_value": overlap.p_value,
                    "n_heads": overlap.n,
                }
            )
    _write(out, "sft_mask_overlap.csv", pd.DataFrame(rows))
    _times(
        out,
        "smollm2",
        time.perf_counter() - start,
        {
            k: v
            for k, v in vars(config).items()
            if k in ("steps", "batch_size", "lr", "method", "lora_rank", "lora_alpha", "lora_targets", "instructed")
        },
    )


def _selection_setup(args, spec: Selection):
    """(fresh base model loader, task resolver, compared-run config, probe config) of the select stage."""

    if args.model == "organism":
        model = hl.load_model(str(_base_organism(args)), dtype="float32")
        initial = [p.detach().clone() for p in model.parameters()]

        def load():
            # Full fine-tuning changes only the parameters: restoring them gives the base model back.
            with torch.no_grad():
                for p, value in zip(model.parameters(), initial):
                    p.copy_(value)
            return model

        def resolve(name: str):
            name = name.removeprefix("organism/")
            return hl.load_task(f"organism/{name}")

        make = lambda **kw: FinetuneConfig(batch_size=16, lr=1e-3, **kw)  # noqa: E731 - the organism stage's SFT
    else:
        load = lambda: hl.load_model("smollm2", dtype="float32")  # noqa: E731
        resolve = hl.load_task
        make = lambda **kw: FinetuneConfig.lora(batch_size=8, **kw)  # noqa: E731 - the smollm2 stage's LoRA
    steps = args.steps or spec.steps
    # finetune always takes patterns at its last step; the compared runs do not use them (one example).
    run = lambda seed: make(steps=steps, seed=seed, pattern_examples=1, accuracy=False, progress=False)  # noqa: E731
    probe = make(
        steps=args.probe_steps or spec.probe_steps,
        seed=args.seed,
        pattern_steps=(0,),
        pattern_examples=spec.pattern_examples,
        accuracy=False,
        progress=False,
    )
    return load, resolve, run, probe


def _draw(candidates: list[str], k: int, seed: int, target: str, draw: int) -> list[str]:
    """k random candidates, the same for a (seed, target, draw) on every rerun."""
    rng = np.random.default_rng([seed, zlib.crc32(target.encode()), draw])
    return [candidates[i] for i in sorted(rng.choice(len(candidates), size=k, replace=False))]


def select(args) -> None:
    from headsup_lens.evaluation import answer_loss, generations, score_outputs

    spec = SELECTION[args.model]
    spec = dataclasses.replace(
        spec,
        **{
            k: getattr(args, k)
            for k in ("eval_examples", "pattern_examples", "train_pairs")
            if getattr(args, k) is not None
        },
    )
    out = Path(args.out or ROOT / "figures" / args.model)
    runs = Path(args.runs) / f"{args.model}_sft_selection"
    start = time.perf_counter()
    load, resolve, run_config, probe_config = _selection_setup(args, spec)
    cut = lambda task, n: pattern_subset(task, n, n_train=spec.train_pairs)  # noqa: E731
    n_eval = spec.eval_examples
    candidates = [resolve(n) for n in (args.candidates or spec.candidates)]
    targets = [resolve(n) for n in (args.targets or spec.targets)]
    if not 0 < args.k < len(candidates):
        raise SystemExit(f"--k must lie in [1, {len(candidates) - 1}] (one candidate may be the target)")
    settings = {
        "model": args.model,
        "candidates": [t.name for t in candidates],
        "k": args.k,
        "steps": run_config(0).steps,
        "probe": vars(probe_config),
        "eval_examples": n_eval,
        "train_pairs": spec.train_pairs,
        "seed": args.seed,
    }
    saved = runs / "settings.json"
    if saved.is_file() and json.loads(saved.read_text()) != json.loads(json.dumps(settings)):
        raise SystemExit(f"{runs} holds a run with other settings ({saved}); pass another --runs or remove it")
    atomic_write_text(saved, json.dumps(settings, indent=1))

    # Pattern change of each task under a probe SFT on that task alone (held-out examples, instructed).
    changes = {}
    for task in {t.name: t for t in candidates + targets}.values():
        result = finetune_(
            load(), [cut(task, spec.pattern_examples)], probe_config, out_dir=runs / "probe" / safe_name(task.name)
        )
        steps = sorted(result.patterns)
        changes[task.name] = result.patterns[steps[-1]][task.name] - result.patterns[steps[0]][task.name]

    by_name = {t.name: t for t in candidates}
    rankings, jobs = [], []
    for target in targets:
        pool = {t.name: changes[t.name] for t in candidates if t.name != target.name}
        ranking = rank_by_pattern(changes[target.name], pool)
        centred = rank_by_pattern(changes[target.name], pool, center=True).set_index("candidate")
        ranking["similarity_centred"] = ranking.candidate.map(centred.similarity)
        ranking["rank_centred"] = ranking.candidate.map(centred["rank"])
        ranking.insert(0, "target", target.name)
        rankings.append(ranking)
        chosen = list(ranking.candidate[: args.k])
        jobs.append((target, "none", 0, []))
        jobs += [(target, "selected", seed, chosen) for seed in range(args.seeds)]
        jobs += [(target, "random", d, _draw(list(pool), args.k, args.seed, target.name, d)) for d in range(args.draws)]
        parts = [f"organism/{p}" for p in target.name.removeprefix("organism/").split("+")]
        if len(parts) > 1 and all(p in pool for p in parts):
            jobs += [(target, "oracle", seed, parts) for seed in range(args.seeds)]
        jobs.append((target, "target", 0, [target.name]))
    ranking = pd.concat(rankings, ignore_index=True)
    _write(out, "sft_data_selection_ranking.csv", ranking)

    done_path, gen_path = runs / "runs.csv", runs / "generations.csv"
    done = pd.read_csv(done_path) if done_path.is_file() else pd.DataFrame()
    shown = pd.read_csv(gen_path) if gen_path.is_file() else pd.DataFrame()
    similarity = ranking.set_index(["target", "candidate"]).similarity
    for i, (target, condition, seed, sources) in enumerate(jobs):
        key = (target.name, condition, seed)
        if len(done) and ((done.target == key[0]) & (done.condition == key[1]) & (done.seed == key[2])).any():
            continue
        t0 = time.perf_counter()
        model = load()
        if sources:
            train = [by_name.get(n) or target for n in sources]
            finetune_(model, [cut(t, 1) for t in train], run_config(seed))
        held = cut(target, n_eval)
        inputs, answers = zip(*held.eval_pairs)
        outputs = generations(model, held, instructed=True)
        scores, _ = score_outputs(held, outputs, inputs, answers)
        row = {
            "target": target.name,
            "condition": condition,
            "seed": seed,
            "sources": " ".join(sources),
            "similarity_mean": float(np.mean([similarity[target.name, n] for n in sources]))
            if condition in ("selected", "random", "oracle")
            else np.nan,
            "accuracy": scores["accuracy"],
            "strict": scores["strict"],
            "echo": scores["echo"],
            "answer_loss": answer_loss(model, held, instructed=True),
            "n_eval": len(answers),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        done = pd.concat([done, pd.DataFrame([row])], ignore_index=True)
        shown = pd.concat(
            [
                shown,
                pd.DataFrame(
                    [
                        {
                            "target": target.name,
                            "condition": condition,
                            "seed": seed,
                            "input": x,
                            "answer": a,
                            "output": o,
                        }
                        for x, a, o in list(zip(inputs, answers, outputs))[:10]
                    ]
                ),
            ],
            ignore_index=True,
        )
        _write(runs, "generations.csv", shown)
        _write(runs, "runs.csv", done)  # last: a row here means its generations are stored too
        print(
            f"[{i + 1}/{len(jobs)}] {target.name} {condition} seed {seed} ({' '.join(sources) or 'no SFT'}): "
            f"accuracy {row['accuracy']:.2f}, answer loss {row['answer_loss']:.3f}",
            flush=True,
        )

    wanted = pd.DataFrame([{"target": t.name, "condition": c, "seed": s} for t, c, s, _ in jobs])
    table = wanted.merge(done, on=["target", "condition", "seed"], how="left")
    table["sources"] = table.sources.fillna("")  # no SFT: no sources (read back from the CSV as NaN)
    _write(out, "sft_data_selection_runs.csv", table)
    _write(out, "sft_data_selection_generations.csv", wanted.merge(shown, on=["target", "condition", "seed"]))
    summary = _selection_summary(table)
    _write(out, "sft_data_selection.csv", summary)
    _write(out, "sft_data_selection_similarity.csv", _similarity_vs_loss(table))
    _selection_figure(out, table, not args.no_png)
    _times(
        out,
        f"select ({args.model})",
        time.perf_counter() - start,
        {k: v for k, v in settings.items() if k != "probe"} | {"seeds": args.seeds, "draws": args.draws},
    )


CONDITIONS = ("none", "random", "selected", "oracle", "target")
TIE_NATS = 1e-6  # loss gaps below this are ties (runs on the same sources)
PAIRED = (
    ("selected", "random"),
    ("selected", "none"),
    ("random", "none"),
    ("oracle", "random"),
    ("selected", "oracle"),
)


def _selection_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per target and condition: n runs, their seeds, mean / SD (n-1) / min / max of accuracy and answer
    loss; then per condition the mean over targets, and paired differences of the per-target means
    (selected - random, ...: mean, min, max, on how many targets the first is lower, sign and
    Wilcoxon signed-rank p-values)."""
    import scipy.stats

    rows = []
    for (target, condition), group in table.groupby(["target", "condition"], sort=False):
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
        decided = gap[
            gap.abs() > TIE_NATS
        ]  # the same sources (possible with few candidates) tie: the sign test drops ties
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
                # Paired over targets (the means of each target's runs), two-sided.
                "p_sign": scipy.stats.binomtest(lower, len(decided)).pvalue if len(decided) else np.nan,
                "p_wilcoxon": scipy.stats.wilcoxon(decided).pvalue if len(decided) > 1 else np.nan,
            }
        )
    return pd.concat([summary, pd.DataFrame(means)], ignore_index=True)


def _similarity_vs_loss(table: pd.DataFrame) -> pd.DataFrame:
    """Per target, over its runs on candidate tasks (selected, random, oracle): Spearman's rho between
    the training set's mean pattern-change similarity to the target and the target's answer loss
    (negative: more similar data, lower loss); then the mean rho over targets."""
    import scipy.stats

    rows = []
    for target, group in table.dropna(subset=["similarity_mean"]).groupby("target", sort=False):
        rho, p = scipy.stats.spearmanr(group.similarity_mean, group.answer_loss)
        rows.append(
            {"target": target, "n_runs": len(group), "n_sets": group.sources.nunique(), "rho": rho, "p_value": p}
        )
    frame = pd.DataFrame(rows)
    if len(frame):
        frame = pd.concat(
            [
                frame,
                pd.DataFrame(
                    [
                        {
                            "target": f"mean of {len(frame)} targets",
                            "n_runs": frame.n_runs.sum(),
                            "rho": frame.rho.mean(),
                            "p_value": np.nan,
                        }
                    ]
                ),
            ],
            ignore_index=True,
        )
    return frame


def _selection_figure(out: Path, table: pd.DataFrame, png: bool) -> None:
    import plotly.express as px
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("answer loss on the target (nats, held-out)", "accuracy on the target"),
    )
    palette = dict(zip(CONDITIONS, px.colors.qualitative.Set1))
    for condition in [c for c in CONDITIONS if c in set(table.condition)]:
        part = table[table.condition == condition]
        for row, metric in ((1, "answer_loss"), (2, "accuracy")):
            fig.add_trace(
                go.Box(
                    x=part.target.str.removeprefix("organism/"),
                    y=part[metric],
                    name=condition,
                    legendgroup=condition,
                    showlegend=row == 1,
                    boxpoints="all",
                    jitter=0.4,
                    pointpos=0,
                    marker_color=palette[condition],
                    line_width=1,
                ),
                row=row,
                col=1,
            )
    fig.update_layout(
        boxmode="group",
        width=1400,
        height=800,
        title="Pattern-guided data selection: SFT on the k candidates whose pattern change best matches "
        "the target's vs k random ones",
    )
    save_figure(fig, out / "sft_data_selection", png=png)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    {"organism": organism, "smollm2": smollm2, "select": select, "grouping": grouping}[args.stage](args)


if __name__ == "__main__":
    main()
