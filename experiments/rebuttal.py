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

import dataclasses
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from headsup_lens.options import DebugOptions, check_counts, option, parse
from headsup_lens.reproduce._script import script_errors

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("mask", "lora r=8", "full")
GIB = 2**30


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


def _merge(path: Path, new: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`new` replaces the rows of `path` with the same `keys`; the file is written atomically."""
    from headsup_lens._io import atomic_write

    old = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=new.columns)
    index = pd.MultiIndex.from_frame(old[keys].astype(str)) if len(old) else None
    replaced = pd.MultiIndex.from_frame(new[keys].astype(str))
    kept = old[~index.isin(replaced)] if index is not None else old
    table = pd.concat([kept, new], ignore_index=True) if len(kept) else new
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))
    return table


# ---------------------------------------------------------------------------------------------- W1
def overhead_one(o: Options) -> dict:
    """One model and method in this process: the step times and the process's peak memory."""
    import torch

    import headsup_lens as hl
    from headsup_lens.sft import FinetuneConfig, finetune_
    from headsup_lens.training import StepTimer

    torch.set_num_threads(o.threads)
    model = hl.load_model(o.models[0], dtype="float32", device="cpu")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    task = hl.load_task(o.task, o.data_dir)
    parameters = sum(p.numel() for p in model.parameters())
    timer = StepTimer()
    cpu = [time.process_time()]  # the process's CPU time at each step's end: on one thread, its compute
    method = o.methods[0]
    trainable: list[int] = []  # counted during the first step, while the trained weights require grad

    def cpu_time(_end) -> None:
        cpu.append(time.process_time())

    def count(_end) -> None:
        if not trainable:
            trainable.append(sum(p.numel() for p in model.parameters() if p.requires_grad))

    if method == "mask":
        config = hl.TrainConfig(steps=o.steps, batch_size=o.batch_size, progress=False, checkpoint_every=0)
        hl.train_mask(model, task, config, callbacks=[timer, cpu_time])
        trainable.append(model.cfg.n_layers * model.cfg.n_heads)  # the mask logits, outside the model
    else:
        base = FinetuneConfig.lora() if method.startswith("lora") else FinetuneConfig()
        config = dataclasses.replace(
            base,
            steps=o.steps,
            batch_size=o.batch_size,
            instructed=False,  # the mask's data: inputs without instruction
            accuracy=False,
            pattern_examples=1,
            checkpoint_every=0,
            progress=False,
        )
        finetune_(model, [task], config, callbacks=[timer, cpu_time, count])
    # CPU seconds per step: on one thread the step's compute, unchanged by other processes on the machine
    # (a busy machine stretches the wall time); the wall time is kept beside it.
    steps_cpu = [b - a for a, b in itertools.pairwise(cpu)][o.warmup :]
    seconds = statistics.median(steps_cpu)
    wall = timer.seconds[o.warmup :]
    return {
        "method": method,
        "model": o.models[0],
        "seconds_per_step": seconds,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
        "trainable_parameters": trainable[0],
        "examples_per_second": o.batch_size / seconds,
        "parameters": parameters,
        "loaded_gib": loaded / GIB,
        "wall_seconds_per_step": statistics.median(wall),
        "cpu_step_min": min(steps_cpu),
        "cpu_step_max": max(steps_cpu),
        "timed_steps": len(steps_cpu),
        "batch_size": o.batch_size,
        "task": o.task,
        "threads": o.threads,
        "dtype": "float32",
        "device": "cpu",
    }


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
    return _merge(Path(o.out) / "overhead.csv", pd.DataFrame(rows), ["model", "method"])


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
    return _merge(out / "tasks_per_head.csv", pd.DataFrame(rows), ["model"])


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
