"""The experiments the paper's rebuttal added, on the models this project runs (`figures/rebuttal/`).

W1, training overhead: seconds per step, peak memory, trainable parameters and examples per second
of mask training against LoRA (r = 8, alpha = 16) and full fine-tuning, the same data (a task's
training pairs without instruction, batch 16) on the same machine, fp32, one torch thread. Each
(model, method) runs in a fresh process, so its peak resident memory (weights included, as a GPU's
peak includes them) is its own; the step time is the median of the timed steps after the warm-up.

    python experiments/rebuttal.py overhead --models smollm2 gemma3-270m     # overhead.csv

Q1, tasks per head: for the masks of many tasks trained on one schedule (`<figures>/<model>/fast_masks/`,
one `<task>.safetensors` each), how many tasks keep each head on average, and the share of heads no
task keeps; a per-head map of the counts (`tasks_per_head_<model>.*`).

    python experiments/rebuttal.py tasks-per-head --models smollm2 gemma3-270m   # tasks_per_head.csv

Rows of a model and method (or model) replace the stored ones; the others stay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from headsup_lens.options import DebugOptions, check_counts, option, parse
from headsup_lens.reproduce._rebuttal import METHODS, merge_rows, training_overhead
from headsup_lens.reproduce._script import script_errors

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, kw_only=True)
class Options(DebugOptions):
    """Options of the rebuttal's experiments."""

    stage: str = option(positional=True, choices=("overhead", "tasks-per-head", "overhead-one"))
    """overhead (W1), tasks-per-head (Q1), or overhead-one (one model and method, run by overhead)."""
    models: list[str] = field(default_factory=lambda: ["smollm2", "gemma3-270m"])
    """Models (`load_model` names)."""
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    """overhead: methods to time: mask, "lora r=8", full."""
    task: str = "antonym"
    """overhead: the task whose training pairs (no instruction) make the batches."""
    batch_size: int = 16
    """overhead: examples per step (the paper's 16)."""
    steps: int = 7
    """overhead: steps run per method (the first `warmup` are not timed)."""
    warmup: int = 2
    """overhead: steps not timed (at least 1: the first step also pays for setting up)."""
    threads: int = 1
    """torch CPU threads."""
    data_dir: str | None = None
    """Data directory of the paper's tasks (default: $HEADSUP_DATA_DIR)."""
    figures: str = str(ROOT / "figures")
    """Folder of the per-model results (tasks-per-head reads `<figures>/<model>/fast_masks/`)."""
    out: str = str(ROOT / "figures" / "rebuttal")
    """Output folder."""
    png: bool = True
    """tasks-per-head: also write the per-head maps as PNG."""

    def __post_init__(self) -> None:
        check_counts(self, batch_size=1, steps=2, warmup=1, threads=1)
        if self.warmup >= self.steps:
            raise ValueError(f"warmup ({self.warmup}) must be smaller than steps ({self.steps})")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"methods: unknown {unknown}; choose from {', '.join(METHODS)}")


def overhead_one(o: Options) -> dict:
    """One model and method in this process (`reproduce._rebuttal.training_overhead`)."""
    return training_overhead(
        o.models[0],
        o.methods[0],
        o.task,
        steps=o.steps,
        batch_size=o.batch_size,
        warmup=o.warmup,
        threads=o.threads,
        data_dir=o.data_dir,
    )


def overhead(o: Options) -> pd.DataFrame:
    from headsup_lens.data import load_task
    from headsup_lens.models._builtin import check_model_name

    for model in o.models:  # names checked here, at once, not after a child process has loaded torch
        check_model_name(model)
    load_task(o.task, o.data_dir)
    rows = []
    for model in o.models:
        for method in o.methods:
            started = time.perf_counter()
            args = [sys.executable, __file__, "overhead-one", "--models", model, "--methods", method]
            args += ["--task", o.task, "--batch-size", str(o.batch_size), "--steps", str(o.steps)]
            args += ["--warmup", str(o.warmup), "--threads", str(o.threads)]
            args += ["--data-dir", o.data_dir] if o.data_dir else []
            args += ["--debug"] if o.debug else []
            env = {**os.environ, "OMP_NUM_THREADS": str(o.threads), "HEADSUP_PROGRESS": "0"}
            done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:  # the child's own one-line error (its traceback with --debug)
                lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
                reason = lines[-1].removeprefix("rebuttal: error: ")
                raise ValueError(f"overhead: {model} {method} failed: {reason}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{model:12s} {method:9s} {row['seconds_per_step']:.2f} s/step, peak {row['peak_gib']:.2f} GiB, "
                f"{row['trainable_parameters']} trainable ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
            rows.append(row)
    Path(o.out).mkdir(parents=True, exist_ok=True)
    return merge_rows(Path(o.out) / "overhead.csv", pd.DataFrame(rows), ["model", "method"])


# ---------------------------------------------------------------------------------------------- Q1
def tasks_per_head(o: Options) -> pd.DataFrame:
    import headsup_lens as hl
    from headsup_lens.analysis import pathway_heads
    from headsup_lens.masks import HeadMask
    from headsup_lens.plots import save_figure, usage_heatmap

    rows = []
    out = Path(o.out)
    for name in o.models:
        folder = Path(o.figures) / name / "fast_masks"
        paths = sorted(folder.glob("*.safetensors"))
        if not paths:
            raise ValueError(f"tasks-per-head: no masks in {folder}")
        model = hl.load_model(name)
        masks = {p.stem: HeadMask.load(p, model) for p in paths}  # a damaged or another model's file: named
        schedules = {
            (m.metadata.get("steps"), m.metadata.get("batch_size"), m.metadata.get("seed")) for m in masks.values()
        }
        if len(schedules) != 1:
            raise ValueError(f"tasks-per-head: the masks in {folder} come from different schedules {sorted(schedules)}")
        steps, batch, seed = schedules.pop()
        heads = pathway_heads(masks)
        counts = heads.counts
        rows.append(
            {
                "model": name,
                "parameters": sum(p.numel() for p in model.parameters()),
                "n_heads": counts.numel(),
                "n_tasks": len(masks),
                "schedule": f"{steps} steps x batch {batch}, seed {seed}",
                "avg_tasks_per_head": float(counts.float().mean()),
                "share_of_heads_used_by_no_task": float((counts == 0).float().mean()),
                "share_of_heads_used_by_every_task": float((counts == len(masks)).float().mean()),
                "mean_heads_kept": float(sum(m.n_kept for m in masks.values()) / len(masks)),
                "tasks": " ".join(sorted(masks)),
            }
        )
        per_head = pd.DataFrame(
            [
                {"layer": layer, "head": head, "n_tasks": int(counts[layer, head])}
                for layer in range(counts.shape[0])
                for head in range(counts.shape[1])
            ]
        )
        out.mkdir(parents=True, exist_ok=True)
        per_head.to_csv(out / f"tasks_per_head_map_{name}.csv", index=False)
        title = f"{name}: tasks (of {len(masks)}) whose mask keeps each head"
        save_figure(usage_heatmap(heads, title=title), out / f"tasks_per_head_{name}", png=o.png, root=out.parent)
        print(f"{name}: {rows[-1]['avg_tasks_per_head']:.2f} tasks per head of {len(masks)}", flush=True)
    return merge_rows(out / "tasks_per_head.csv", pd.DataFrame(rows), ["model"])


def main(argv: list[str] | None = None) -> None:
    o, given = parse(Options, argv, prog="rebuttal", description=__doc__)
    with script_errors("rebuttal", o, given):
        if o.stage == "overhead-one":
            print(json.dumps(overhead_one(o)))
            return
        table = overhead(o) if o.stage == "overhead" else tasks_per_head(o)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
