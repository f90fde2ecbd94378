"""The rebuttal's W1 measurement: one model and method's training step times and peak memory, in the
calling process (`experiments/rebuttal.py overhead` runs each in a fresh one, so the peak is its own),
and the row merge its tables use."""

from __future__ import annotations

import dataclasses
import itertools
import resource
import statistics
import time
from pathlib import Path
from typing import cast

import pandas as pd

GIB = 2**30
METHODS = ("mask", "lora r=8", "full")


def merge_rows(path: Path, new: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`new` replaces the rows of `path` with the same `keys`; the file is written atomically."""
    from .._io import atomic_write

    old = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=new.columns)
    index = pd.MultiIndex.from_frame(old[keys].astype(str)) if len(old) else None
    replaced = pd.MultiIndex.from_frame(new[keys].astype(str))
    kept = old[~index.isin(replaced)] if index is not None else old
    table = cast(pd.DataFrame, pd.concat([kept, new], ignore_index=True) if len(kept) else new)
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))
    return table


def training_overhead(
    model_name: str,
    method: str,
    task_name: str,
    *,
    steps: int,
    batch_size: int,
    warmup: int,
    threads: int,
    data_dir: str | None = None,
) -> dict:
    """One model and method (`METHODS`) trained in this process: the median CPU seconds per step after
    `warmup` steps (on one thread, the step's compute), the wall time beside it, the process's peak
    resident memory, and the trainable parameters."""
    import torch

    import headsup_lens as hl
    from headsup_lens.sft import FinetuneConfig, finetune_
    from headsup_lens.training import StepTimer

    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    torch.set_num_threads(threads)
    model = hl.load_model(model_name, dtype="float32", device="cpu")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    task = hl.load_task(task_name, data_dir)
    parameters = sum(p.numel() for p in model.parameters())
    timer = StepTimer()
    cpu = [time.process_time()]  # the process's CPU time at each step's end: on one thread, its compute
    trainable: list[int] = []  # counted during the first step, while the trained weights require grad

    def cpu_time(_end) -> None:
        cpu.append(time.process_time())

    def count(_end) -> None:
        if not trainable:
            trainable.append(sum(p.numel() for p in model.parameters() if p.requires_grad))

    if method == "mask":
        config = hl.TrainConfig(steps=steps, batch_size=batch_size, progress=False, checkpoint_every=0)
        hl.train_mask(model, task, config, callbacks=[timer, cpu_time])
        trainable.append(model.cfg.n_layers * model.cfg.n_heads)  # the mask logits, outside the model
    else:
        base = FinetuneConfig.lora() if method.startswith("lora") else FinetuneConfig()
        config = dataclasses.replace(
            base,
            steps=steps,
            batch_size=batch_size,
            instructed=False,  # the mask's data: inputs without instruction
            accuracy=False,
            pattern_examples=1,
            checkpoint_every=0,
            progress=False,
        )
        finetune_(model, [task], config, callbacks=[timer, cpu_time, count])
    # CPU seconds per step: on one thread the step's compute, unchanged by other processes on the machine
    # (a busy machine stretches the wall time); the wall time is kept beside it.
    steps_cpu = [b - a for a, b in itertools.pairwise(cpu)][warmup:]
    seconds = statistics.median(steps_cpu)
    return {
        "method": method,
        "model": model_name,
        "seconds_per_step": seconds,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
        "trainable_parameters": trainable[0],
        "examples_per_second": batch_size / seconds,
        "parameters": parameters,
        "loaded_gib": loaded / GIB,
        "wall_seconds_per_step": statistics.median(timer.seconds[warmup:]),
        "cpu_step_min": min(steps_cpu),
        "cpu_step_max": max(steps_cpu),
        "timed_steps": len(steps_cpu),
        "batch_size": batch_size,
        "task": task_name,
        "threads": threads,
        "dtype": "float32",
        "device": "cpu",
    }
