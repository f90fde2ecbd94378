"""Memory model of one mask-training step: peak memory split into weights, activations and
workspace, measured at several model sizes, fitted, and extrapolated to Llama-3.1-8B in bf16.

One step of the paper's recipe (batch 16, straight-through masks at the value gate, answer-only
loss, AdamW on the mask logits) on the 16 first training pairs of a task, all in one right-padded
pass (as on a GPU: rows not packed, `native_options(pack_rows=False)`), is run under
`torch.profiler` with `profile_memory=True`. The profiler records every allocation and release of
the allocator (CPU, or CUDA) with its size; summed in time order they give the bytes of tensors
alive at each moment of the step. Then
- weights: the bytes of the model's parameters and buffers (held before and after the step);
- activations: what the forward pass leaves alive for the backward pass (alive at its end, minus
  alive at its start): the tensors autograd saved, the loss;
- workspace: the peak of the step minus the activations: temporaries of single operations and of
  the backward pass (logits of the answer positions and their gradient, a layer's intermediates);
- peak = weights + activations + workspace (GPU: `torch.cuda.max_memory_allocated` is printed beside it).
The fit (fp32 steps of `LLAMA_KIND` decoders): activations per token of the pass and per layer as
a * d_model + b * d_mlp bytes (non-negative least squares over the measured sizes and tasks),
workspace as c * (answer tokens x vocabulary) + e * (tokens x d_mlp) bytes; bf16 keeps its norms
and loss in fp32, so a bf16 step measured beside its fp32 twin gives the bf16/fp32 ratio. Then
Llama-3.1-8B-Instruct's shape in bf16 at the measured token counts, beside the paper rebuttal's
16.29 GiB (bf16 weights alone 14.96 GiB).

    python experiments/bench/memory.py                         # the default runs (three sizes, long inputs, bf16)
    python experiments/bench/memory.py --runs smollm2:antonym:bf16 qwen0.5b:antonym:bf16
    python experiments/bench/memory.py --out figures/bench     # also memory.csv / memory_fit.csv
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from _plain import label, load, word_task
from scipy.optimize import nnls
from torch.profiler import ProfilerActivity, profile, record_function

from headsup_lens.data import collate, encode_pairs, load_task
from headsup_lens.gates import gate_hooks, native_options
from headsup_lens.models import pad_token_id
from headsup_lens.objective import answer_nll
from headsup_lens.options import parse
from headsup_lens.training import TrainConfig, left_tail_gumbel, straight_through

GIB = 2**30
# Llama-3.1-8B-Instruct: 32 layers, d_model 4096, d_mlp 14336, 32 heads over 8 KV heads, vocab 128256.
LLAMA_8B = dict(n_layers=32, d_model=4096, d_mlp=14336, vocab=128_256, parameters=8_030_261_248)
# Decoders of Llama-3.1-8B's kind (a norm before attention and one before a gated MLP): the fit uses
# these steps only (Gemma-3, say, adds norms, so its bytes per token follow another law).
LLAMA_KIND = ("llama", "qwen2")
REBUTTAL_GIB = 16.29  # the paper's rebuttal: Llama-3.1-8B-Instruct mask training, peak GPU memory


DEFAULT_RUNS = [
    "smollm2:antonym:fp32",
    "qwen0.5b:antonym:fp32",
    "qwen1.5b:antonym:fp32",
    "smollm2:ag_news:fp32",
    "smollm2:translation/en-fr:fp32",
    "smollm2:antonym:bf16",
]


@dataclass
class Options:
    """Options of the memory measurement."""

    runs: list[str] = field(default_factory=lambda: list(DEFAULT_RUNS))
    """Steps to measure, each MODEL:TASK:DTYPE. MODEL: `smollm2`, a Hugging Face directory or a shape with random
    weights (`qwen0.5b`, `qwen1.5b`); TASK: its 16 first training pairs make the batch (`reverse`: a made-up word
    task); DTYPE: fp32 or bf16. The fit uses the fp32 steps; a bf16 step of a model and task also measured in fp32
    gives the bf16/fp32 ratio applied to the extrapolation."""
    checkpointing: list[bool] = field(default_factory=lambda: [False, True])
    """Measure without and with activation checkpointing (`TrainConfig.activation_checkpointing`)."""
    batch_size: int = 16
    """Rows of the step (one pass)."""
    device: str | None = None
    """Device (default: cuda when available)."""
    threads: int = 1
    """torch CPU threads."""
    out: str | None = None
    """Folder for memory.csv and memory_fit.csv (e.g. figures/bench)."""


def timeline(prof, device: torch.device) -> tuple[np.ndarray, np.ndarray, dict[str, list[tuple[int, int]]]]:
    """Times (ns) and bytes alive after each allocation event of `device`, and the ranges of the
    step's labelled parts."""
    kind = "CUDA" if device.type == "cuda" else "CPU"
    events = prof.profiler.kineto_results.events()
    memory = sorted(
        (e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and str(e.device_type()).endswith(kind)
    )
    ranges: dict[str, list[tuple[int, int]]] = {}
    for e in events:
        if e.name() in ("forward", "backward", "optimizer"):
            ranges.setdefault(e.name(), []).append((e.start_ns(), e.end_ns()))
    times = np.array([t for t, _ in memory], dtype=np.int64)
    alive = np.cumsum([n for _, n in memory], dtype=np.int64)
    return times, alive, ranges


def alive_at(times: np.ndarray, alive: np.ndarray, t: int) -> int:
    i = int(np.searchsorted(times, t, side="right")) - 1
    return int(alive[i]) if i >= 0 else 0


def one_step(model, rows, checkpoint: bool) -> None:
    """The training loop's step on one pass of `rows` (see `train_mask`), with labelled parts."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    device = torch.device(model.cfg.device)
    config = TrainConfig()
    logits = torch.full((len(rows), n_layers, n_heads), config.init_mean, device=device, requires_grad=True)
    optimizer = torch.optim.AdamW([logits], lr=config.lr, weight_decay=config.weight_decay)
    noise = left_tail_gumbel((len(rows), n_layers, n_heads), torch.Generator().manual_seed(0)).to(device)
    batch = collate(rows, pad_id=pad_token_id(model), device=device)
    n_answers = sum(len(answer) for _, answer in rows)
    with record_function("forward"):
        mask = straight_through(logits, noise, config.tau_start)
        nll, _ = answer_nll(model, batch, gate_hooks(model, mask), checkpoint=checkpoint)
        loss = nll.sum() / n_answers
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()


@native_options(pack_rows=False)
def measure(model, rows, checkpoint: bool) -> dict:
    device = torch.device(model.cfg.device)
    one_step(model, rows, checkpoint)  # warm-up: lazy buffers, kernels
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    with profile(activities=activities, profile_memory=True) as prof:
        one_step(model, rows, checkpoint)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    times, alive, ranges = timeline(prof, device)
    start, end = ranges["forward"][0]
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    activations = alive_at(times, alive, end) - alive_at(times, alive, start - 1)
    peak = int(alive.max()) if len(alive) else 0
    # The vocabulary's share: its weight matrices (the embedding, and the unembedding when untied) and
    # one fp copy of the logits at the answer positions, the only positions the answer loss unembeds.
    vocab_weights = sum(
        t.numel() * t.element_size() for t in dict.fromkeys(model.parameters()) if model.cfg.d_vocab in t.shape
    )
    answers = sum(len(a) for _, a in rows)
    result = {
        "weights_gib": weights / GIB,
        "vocab_weights_gib": vocab_weights / GIB,
        "answer_logits_gib": answers * model.cfg.d_vocab * torch.finfo(model.cfg.dtype).bits / 8 / GIB,
        "activations_gib": activations / GIB,
        "workspace_gib": (peak - activations) / GIB,
        "peak_gib": (weights + peak) / GIB,
    }
    if device.type == "cuda":
        result["cuda_max_allocated_gib"] = (torch.cuda.max_memory_allocated(device) - before) / GIB + weights / GIB
    return result


def batch_rows(model, task_name: str, batch_size: int):
    """`(task name, encoded rows)`: the first training pairs of `task_name` (`reverse`: a made-up word task)."""
    task = word_task() if task_name == "reverse" else load_task(task_name)
    pairs = [task.pairs[i] for i in task.split_indices("train")][:batch_size]
    return task.name, encode_pairs(model, pairs)


def fit(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative least squares over measured steps (a count of bytes per unit is never negative;
    over a few steps plain least squares may trade one term against the other): activation bytes per
    token (of the padded pass) and layer = a d_model + b d_mlp; workspace bytes = c answers x
    vocabulary + e tokens x d_mlp."""
    design = np.stack([rows.d_model, rows.d_mlp], axis=1).astype(float)
    per_token_layer = rows.activations_gib * GIB / (rows.tokens * rows.n_layers)
    activation_coef = nnls(design, per_token_layer.to_numpy(dtype=float))[0]
    design = np.stack([rows.answers * rows.vocab, rows.tokens * rows.d_mlp], axis=1).astype(float)
    workspace_coef = nnls(design, (rows.workspace_gib * GIB).to_numpy(dtype=float))[0]
    return activation_coef, workspace_coef


def bf16_ratios(table: pd.DataFrame) -> dict[bool, tuple[float, float]]:
    """Per checkpointing setting: (activations, workspace) of bf16 steps over the same model and task
    in fp32; (0.5, 0.5) where no pair was measured (half the bytes per element)."""
    ratios = {}
    for checkpoint, part in table.groupby("checkpointing"):
        pairs = part.pivot_table(index=["model", "task"], columns="dtype", values=["activations_gib", "workspace_gib"])
        if ("activations_gib", "bfloat16") in pairs and ("activations_gib", "float32") in pairs:
            both = pairs.dropna()
            ratios[checkpoint] = tuple(
                float((both[(column, "bfloat16")] / both[(column, "float32")]).mean())
                for column in ("activations_gib", "workspace_gib")
            )
        if checkpoint not in ratios or any(r != r for r in ratios[checkpoint]):  # NaN: no pair
            ratios[checkpoint] = (0.5, 0.5)
    return ratios


def extrapolate(table: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """The fp32 fit per checkpointing setting (steps of `LLAMA_KIND` models), and Llama-3.1-8B in
    bf16 (the fit times the measured bf16/fp32 ratio) at the token counts of each task (SmolLM2's
    tokenizer when it was measured: a real subword tokenizer, close to Llama 3's; its chat format has
    a few tokens less)."""
    lines, rows = [], []
    weights = LLAMA_8B["parameters"] * 2 / GIB
    ratios = bf16_ratios(table)
    fp32 = table[(table.dtype == "float32") & table.family.isin(LLAMA_KIND)]
    for checkpoint, part in fp32.groupby("checkpointing"):
        if part.d_model.nunique() < 2:
            continue
        (a, b), (c, e) = fit(part)
        act_ratio, ws_ratio = ratios[checkpoint]
        lines.append(
            f"fit (float32, checkpointing={checkpoint}, {len(part)} steps): activations per token and layer = "
            f"{a:.1f} d_model + {b:.1f} d_mlp bytes; workspace = {c:.2f} answers x vocabulary + {e:.2f} tokens x "
            f"d_mlp bytes; bf16/fp32: activations x {act_ratio:.3f}, workspace x {ws_ratio:.3f}"
        )
        for task, group in part.groupby("task"):
            real = group[group.model == "smollm2"]
            source = real if len(real) else group
            tokens, answers = float(source.tokens.mean()), float(source.answers.mean())
            per_layer = a * LLAMA_8B["d_model"] + b * LLAMA_8B["d_mlp"]
            activations = act_ratio * tokens * LLAMA_8B["n_layers"] * per_layer / GIB
            workspace = ws_ratio * (c * answers * LLAMA_8B["vocab"] + e * tokens * LLAMA_8B["d_mlp"]) / GIB
            peak = weights + activations + workspace
            rows.append(
                {
                    "model": "Llama-3.1-8B-Instruct shape (extrapolated)",
                    "dtype": "bfloat16",
                    "task": task,
                    "checkpointing": checkpoint,
                    "tokens": tokens,
                    "answers": answers,
                    "weights_gib": weights,
                    "activations_gib": activations,
                    "workspace_gib": workspace,
                    "peak_gib": peak,
                    "peak_over_weights": peak / weights,
                    "rebuttal_gib": REBUTTAL_GIB,
                }
            )
    return lines, pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="memory.py", description=__doc__)
    torch.set_num_threads(options.threads)
    runs = [run.rsplit(":", 2) for run in options.runs]
    if any(len(run) != 3 or run[2] not in ("fp32", "bf16") for run in runs):
        raise SystemExit(f"--runs takes MODEL:TASK:DTYPE with DTYPE fp32 or bf16, got {options.runs}")
    records = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, dtype in dict.fromkeys((name, dtype) for name, _, dtype in runs):  # each model loads once
            model, _ = load(name, Path(scratch), options.device, dtype)
            cfg = model.cfg
            for task_name in [task for n, task, d in runs if (n, d) == (name, dtype)]:
                task, rows = batch_rows(model, task_name, options.batch_size)
                for checkpoint in options.checkpointing:
                    result = measure(model, rows, checkpoint)
                    record = {
                        "model": name,
                        "label": label(name),
                        "family": model.original_model.config.model_type,
                        "dtype": str(cfg.dtype).removeprefix("torch."),
                        "device": str(cfg.device),
                        "task": task,
                        "checkpointing": checkpoint,
                        "n_layers": cfg.n_layers,
                        "d_model": cfg.d_model,
                        "d_mlp": cfg.d_mlp,
                        "vocab": cfg.d_vocab,
                        "parameters": sum(p.numel() for p in model.parameters()),
                        "rows": len(rows),
                        "tokens": rows_tokens(rows),
                        "answers": sum(len(a) for _, a in rows),
                        **result,
                    }
                    records.append(record)
                    print(
                        f"{record['label']:36s} {record['dtype']:8s} {task:18s} checkpointing={checkpoint!s:5s} "
                        f"{record['tokens']:5d} tokens: weights {result['weights_gib']:.3f} GiB, activations "
                        f"{result['activations_gib']:.3f}, workspace {result['workspace_gib']:.3f}, peak {result['peak_gib']:.3f}"
                        + (
                            f" (cuda max allocated {result['cuda_max_allocated_gib']:.3f})"
                            if "cuda_max_allocated_gib" in result
                            else ""
                        ),
                        flush=True,
                    )
            del model
    table = pd.DataFrame(records)
    print()
    print(table.drop(columns=["device"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    lines, extrapolated = extrapolate(table)
    for line in lines:
        print(line)
    if len(extrapolated):
        print()
        print(extrapolated.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if options.out is not None:
        out = Path(options.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "memory.csv", index=False)
        if len(extrapolated):
            extrapolated.to_csv(out / "memory_fit.csv", index=False)
        print(f"wrote {out / 'memory.csv'}" + (f" and {out / 'memory_fit.csv'}" if len(extrapolated) else ""))
    return 0


def rows_tokens(rows) -> int:
    """Positions of the one right-padded pass over `rows` (padding is computed too)."""
    return len(rows) * max(len(p) + len(a) for p, a in rows)


if __name__ == "__main__":
    sys.exit(main())
