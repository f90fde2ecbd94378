"""The SFT activation-pattern paper's experiments (Zhao, Du et al.) on the organism and on SmolLM2.

    python experiments/sft_patterns.py organism   # base organism -> instruction SFT on every task + composites
    python experiments/sft_patterns.py smollm2    # LoRA SFT of SmolLM2-135M-Instruct on function-vector tasks

Each stage fine-tunes with `hl.finetune` (run folder with checkpoints under `--runs`, git-ignored:
a rerun resumes), takes activation patterns (`activation_pattern`, total derivative of the answer
loss w.r.t. each head's attention probabilities, held-out examples) before, along and after the
run, and writes to `<out>/`:
- `sft_table1.csv`: Gini, CV (population SD) and Pearson kurtosis per task, before -> after (Table 1);
- `sft_fig2_change_correlation.csv/.html/.png`: correlations between tasks' pattern changes (Fig. 2);
- `sft_fig5_dynamics.csv/.html/.png`: correlation and MSE to the final pattern vs step, and accuracy (Fig. 5);
- `sft_accuracy.csv`: greedy accuracy on the pattern examples at every pattern step;
- organism: `sft_composition.csv`: least-squares fit of a composite task's pattern change from its
  two basic tasks' changes (Eq. 3), R² against a shuffled-heads baseline;
- smollm2: `sft_mask_overlap.csv`: the k heads with the largest pattern change vs the k heads the
  learned Heads-up mask of the same task removes (`masks/<task>.safetensors`), hypergeometric p.
Wall times are appended to `<out>/sft_times.csv`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import headsup_lens as hl
from headsup_lens._io import atomic_write_text
from headsup_lens.analysis import (fit_pattern_change, head_overlap, pattern_correlation, pattern_statistics,
                                   pattern_trajectory, shuffled_fit_r2, top_heads)
from headsup_lens.plots import save_figure
from headsup_lens.training import FinetuneConfig, finetune, safe_name

ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["organism", "smollm2"])
    p.add_argument("--out", default=None, help="output folder (default: figures/<stage>)")
    p.add_argument("--runs", default=str(ROOT / "runs"), help="run folders (default: runs/, git-ignored)")
    p.add_argument("--base", default=str(ROOT / "runs" / "organism_base"),
                   help="organism stage: the base organism (trained here when missing: OrganismConfig.base)")
    p.add_argument("--tasks", nargs="+", default=None, help="smollm2 stage: function-vector tasks")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-png", action="store_true")
    return p


# The base organism's recipe: OrganismConfig.base() with a shorter schedule (CPU time).
BASE_RECIPE = {"steps": 500, "batch_size": 32, "warmup_steps": 50, "checkpoint_every": 100}
COMPOSITES = (("plural", "uppercase"), ("reverse", "uppercase"))
SMOLLM2_TASKS = ("country-capital", "person-sport", "antonym")


def _changes(before: dict, after: dict) -> dict:
    return {name: after[name] - before[name] for name in before}


def _table1(before: dict, after: dict, n_examples: int, seed: int) -> pd.DataFrame:
    a, b = pattern_statistics(before).set_index("pattern"), pattern_statistics(after).set_index("pattern")
    rows = []
    for name in a.index:
        rows.append({"task": name, **{f"{k}_before": a.loc[name, k] for k in ("gini", "cv", "kurtosis")},
                     **{f"{k}_after": b.loc[name, k] for k in ("gini", "cv", "kurtosis")},
                     "n_examples": n_examples, "seed": seed})
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
    heat = go.Figure(go.Heatmap(z=corr.values, x=list(corr.columns), y=list(corr.index), zmin=-1, zmax=1,
                                colorscale="RdBu", text=np.round(corr.values, 2), texttemplate="%{text}"))
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
    fig = make_subplots(rows=1, cols=3, subplot_titles=("correlation to final pattern", "MSE to final pattern",
                                                        "accuracy (held-out examples)"))
    palette = px.colors.qualitative.Dark24
    for i, task in enumerate(tasks):
        d = dynamics[dynamics.task == task]
        for col, key in enumerate(("correlation", "mse", "accuracy"), start=1):
            if key in d:
                fig.add_trace(go.Scatter(x=d.step, y=d[key], name=task, legendgroup=task, showlegend=col == 1,
                                         mode="lines+markers", line_color=palette[i % len(palette)]), row=1, col=col)
    fig.update_xaxes(title_text="SFT step")
    fig.update_layout(width=1400, height=480, title="Activation patterns along SFT")
    save_figure(fig, out / "sft_fig5_dynamics", png=png)


def _times(out: Path, stage: str, seconds: float, extra: dict) -> None:
    path = out / "sft_times.csv"
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    row = pd.DataFrame([{"stage": stage, "wall_s": round(seconds, 1), "threads": torch.get_num_threads(),
                         "settings": json.dumps(extra)}])
    _write(out, "sft_times.csv", pd.concat([old, row], ignore_index=True))


def organism(args) -> None:
    from headsup_lens.organism import OrganismConfig, composite_task, task as organism_task, train_organism
    from headsup_lens.organism._corpus import TASK_NAMES

    out = Path(args.out or ROOT / "figures" / "organism")
    base_dir = Path(args.base)
    start = time.perf_counter()
    if not (base_dir / "model.safetensors").is_file():
        train_organism(OrganismConfig.base(**BASE_RECIPE, threads=args.threads), base_dir, progress=True)
    model = hl.load_model(str(base_dir), dtype="float32")
    tasks = [organism_task(n) for n in TASK_NAMES] + [composite_task(a, b) for a, b in COMPOSITES]
    steps = args.steps or 200
    config = FinetuneConfig(steps=steps, batch_size=16, lr=1e-3, seed=args.seed,
                            pattern_steps=tuple(s for s in (0, 10, 25, 50, 100) if s <= steps), pattern_examples=32, checkpoint_every=50)
    result = finetune(model, tasks, config, out_dir=Path(args.runs) / f"organism_sft_seed{args.seed}")
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
        pair_r2 = [fit_pattern_change(change[target], {x: change[x], y: change[y]}).r2
                   for i, x in enumerate(others) for y in others[i + 1:]]
        rows.append({"composite": target, "r2": fit.r2,
                     **{f"weight_{k.removeprefix('organism/')}": v for k, v in fit.coefficients.items()},
                     "shuffled_r2_mean": chance.mean(), "shuffled_r2_p95": np.quantile(chance, 0.95),
                     "shuffled_p": float((chance >= fit.r2).mean()), "other_pairs_r2_max": max(pair_r2),
                     "other_pairs_r2_mean": float(np.mean(pair_r2)), "n_heads": change[target].numel(),
                     "seed": args.seed})
    _write(out, "sft_composition.csv", pd.DataFrame(rows))
    _times(out, "organism", time.perf_counter() - start, {**{k: v for k, v in vars(config).items()
                                                            if k in ("steps", "batch_size", "lr", "method")}})


def smollm2(args) -> None:
    from headsup_lens.masks import HeadMask

    out = Path(args.out or ROOT / "figures" / "smollm2")
    start = time.perf_counter()
    model = hl.load_model("smollm2", dtype="float32")
    names = args.tasks or list(SMOLLM2_TASKS)
    tasks = [hl.load_task(n) for n in names]
    # Bare inputs: the setting of the Heads-up masks of the same tasks (and little accuracy before SFT).
    steps = args.steps or 50
    config = FinetuneConfig.lora(steps=steps, batch_size=8, seed=args.seed, instructed=False,
                                 pattern_steps=tuple(s for s in (0, 5, 10, 20, 35) if s <= steps), pattern_examples=16, checkpoint_every=25)
    result = finetune(model, tasks, config, out_dir=Path(args.runs) / f"smollm2_sft_seed{args.seed}")
    steps = sorted(result.patterns)
    before, after = result.patterns[steps[0]], result.patterns[steps[-1]]
    _write(out, "sft_table1.csv", _table1(before, after, config.pattern_examples, args.seed))
    _write(out, "sft_accuracy.csv", result.accuracy)
    _figures(out, result, names, not args.no_png)
    rows = []
    for name, change in _changes(before, after).items():
        path = out / "masks" / f"{safe_name(name)}.safetensors"
        if not path.is_file():
            continue
        mask = HeadMask.load(path)
        removed = (mask.values == 0).float()
        k = int(removed.sum())
        for kind, score in (("|change|", change.abs()), ("increase", change)):
            overlap = head_overlap(top_heads(score, k), removed)
            rows.append({"task": name, "score": kind, "k": k, "overlap": overlap.overlap,
                         "expected": overlap.expected, "p_value": overlap.p_value, "n_heads": overlap.n})
    _write(out, "sft_mask_overlap.csv", pd.DataFrame(rows))
    _times(out, "smollm2", time.perf_counter() - start, {k: v for k, v in vars(config).items()
                                                         if k in ("steps", "batch_size", "lr", "method", "lora_rank",
                                                                  "lora_alpha", "lora_targets", "instructed")})


def main() -> None:
    args = _parser().parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    {"organism": organism, "smollm2": smollm2}[args.stage](args)


if __name__ == "__main__":
    main()
