"""Benchmark: the library's removal sweep, batched evaluation and mask-training step against plain
`transformers` doing the same work, on the same weights, in one run.

For each model (`--models`: SmolLM2's real weights and random weights at the Qwen2.5-0.5B shape by
default) and each section, the library's loop and the loops named by `--versus` run one after the
other; each loop is called once untimed-apart (its first call: compilation, capture, allocation,
reported as `first_s`), then `--calls` times, every call timed on its own between two device
synchronisations. Reported per loop: the median, min and max of those calls; per comparison the
ratio of the medians, other / library (> 1: the library is faster), and the spread of the middle
half (the other's 25th percentile over the library's 75th, and the other's 75th over the library's
25th), per wall second and per CPU second of this process.

The loops (`--versus`; each applies to the sections that have it):
- `plain-static-compiled` (sweep, eval): plain `transformers` at its best: `generate(...,
  cache_implementation="static")` with its decoding step compiled (`torch.compile`, reduce-overhead;
  `_plain.PlainModel.generate_static`) and, in the evaluation, one loss pass per batch compiled at a
  fixed width;
- `plain-compiled` / `plain-captured` (train): a fixed-shape training step (every row padded to the
  longest, one pass, frozen weights) compiled by `torch.compile(mode="reduce-overhead")`, or captured
  by hand as one CUDA graph (`PlainModel.fixed_step`);
- `plain-eager` (every section): a hand-written greedy loop on the dynamic cache and the eager
  forward and backward of the training step's length groups (`PlainModel.greedy`, `train_step`);
- `library-eager-steps` (sweep, eval): the library's decoding steps launched op by op, not replayed as a
  CUDA graph (`native_options(cuda_graph=False)`); `library-compiled-steps`: its fixed-shape decoding
  step compiled by `torch.compile` before its capture (`native_options(compile=True)`);
- `library-eager-train` (train): its training step with the capture off (`TrainConfig(cuda_graph=False)`);
  `library-packed-train`: its fixed-shape step packed to the run's token budget
  (`native_options(pack_rows=True)`, `TrainConfig(cuda_graph=True)`); `library-own-fwd-bwd`: the
  step's forward and backward alone, through the library (its ratio r says the step's overhead);
- `library-bridge` (every section): the library with its direct and native passes off (`gates.direct_path`).
The library's training step is timed step by step inside one `train_mask` run (its first two steps,
the warm-up and the capture, are its first call): a step's time includes its device work (`run_steps`
synchronises around a step when a callback times it), the noise, the optimiser and the history.
Checked: the sweep's generations equal every plain loop's and the sequential reference's (one
forward pass and one `model.generate` per step through the bridge's hooks, `--sequential-steps`
steps); the evaluation's outputs and loss equal every plain loop's and per-example `model.generate`;
the training step's mask gradient equals plain `transformers`' (eager, and the fixed-shape step of
the plain loops) and the bridge's. Memory (a GPU only): peak GPU memory of two `train_mask` steps with
and without activation checkpointing, over the bytes of the model's weights.
`--deadline` (a Unix time): a loop that would start after it is skipped, and a loop running at it
stops its calls there (`calls` says how many were timed). The tables are written after every
section, so a run cut short keeps what it measured. On CUDA the models run in bf16 (unless `--dtype`).

    python experiments/bench/performance.py                         # everything, 50 calls, 1 thread
    python experiments/bench/performance.py --models smollm2 --sections sweep --calls 20
    python experiments/bench/performance.py --out figures/bench     # also performance.csv / .json
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch
from _plain import Clock, PlainModel, label, load, timed, word_task

from headsup_lens import HeadMask, removal_sweep, value_gate
from headsup_lens.analysis import random_order, sweep_masks
from headsup_lens.data import Task, collate, encode_pairs, encode_prompt, load_task, task_prompts
from headsup_lens.evaluation import EvalConfig, evaluate
from headsup_lens.gates import direct_path, gate_hooks, native_options
from headsup_lens.gates._paths import raw_module
from headsup_lens.models import cut_at_stop, encode, left_pad, pad_token_id, prompt_format, stop_token_ids
from headsup_lens.objective import answer_nll, length_batches
from headsup_lens.options import parse
from headsup_lens.training import StepEnd, TrainConfig, left_tail_gumbel, straight_through, train_mask

SECTIONS = ("sweep", "eval", "train", "memory")
# Which section each loop of `--versus` applies to.
LOOPS = {
    "plain-static-compiled": ("sweep", "eval"),
    "plain-compiled": ("train",),
    "plain-captured": ("train",),
    "plain-eager": ("sweep", "eval", "train"),
    "library-eager-steps": ("sweep", "eval"),
    "library-compiled-steps": ("sweep", "eval"),
    "library-eager-train": ("train",),
    "library-packed-train": ("train",),
    "library-own-fwd-bwd": ("train",),
    "library-bridge": ("sweep", "eval", "train"),
}


@dataclass
class Options:
    """Options of the benchmark."""

    models: list[str] = field(default_factory=lambda: ["smollm2", "qwen0.5b"])
    """Models: `smollm2`, `organism`, a Hugging Face directory, or a shape with random weights (`qwen0.5b`, `qwen1.5b`)."""
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    """Which loops to time: sweep, eval, train, memory."""
    versus: list[str] = field(default_factory=lambda: ["plain-static-compiled", "plain-compiled", "plain-eager"])
    """The loops timed beside the library's (see the module's docstring for each)."""
    calls: int = 50
    """Timed calls of every loop (training steps of the training loops), each between two synchronisations."""
    deadline: float = 0.0
    """A Unix time after which no loop starts and a running loop stops its calls (0: none)."""
    threads: int = 1
    """torch CPU threads (1: the numbers hold on a machine whose cores others share too)."""
    device: str | None = None
    """Device (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""
    compile_backend: str = "inductor"
    """`torch.compile`'s backend for the compiled loops (`aot_eager`: traces the same graphs, compiles nothing; the CPU's dry run)."""
    sweep_steps: int = 40
    """Sweep rows: steps 0..N-1 of a random removal order."""
    new_tokens: int = 20
    """Greedy tokens per sweep step."""
    prompt: str = "the garden"
    """The sweep's user text (wrapped in the model's prompt format)."""
    sequential_steps: int = 3
    """Sweep steps and evaluation examples checked against the sequential reference."""
    task: str = "antonym"
    """Task of the evaluation and training sections (`reverse`: a made-up word task, also used when the data is missing)."""
    eval_examples: int = 64
    """Held-out examples of the evaluation section."""
    eval_new_tokens: int = 10
    """Greedy tokens per evaluation example."""
    prefix_sharing: str = "auto"
    """Greedy decoding shares prompt prefixes across rows (the direct pass): auto (on the CPU only), on, off."""
    static_cache: bool = False
    """A static KV cache in the library's greedy decoding (`native_options(static_cache=True)`)."""
    cuda_graph: str = "auto"
    """Replay the library's decoding step as a captured CUDA graph: auto (on a GPU), on, off."""
    pack_rows: str = "auto"
    """Loss passes pack their right-padded rows into one sequence (`native_options(pack_rows=...)`): auto (on the CPU only), on, off."""
    out: str | None = None
    """Folder for performance.csv and performance.json (e.g. figures/bench); nothing is written without it."""


def note(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def late(options: Options) -> bool:
    return bool(options.deadline) and time.time() >= options.deadline


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


@dataclass
class Timing:
    """One loop's timed calls: its first call (compilation, capture, allocation) apart."""

    first: Clock
    clocks: list[Clock]
    peak: float | None
    out: object = None  # the last call's result


def time_calls(fn: Callable[[], object], device: torch.device, options: Options) -> Timing:
    """`fn()` once (its first call), then `options.calls` times, each timed between two
    synchronisations (fewer when the deadline comes); the peak GPU memory of the timed calls."""
    first, out = timed(fn, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    clocks = []
    for _ in range(options.calls):
        clock, out = timed(fn, device=device)
        clocks.append(clock)
        if late(options):
            break
    return Timing(first, clocks, peak_gib(device), out)


class _Enough(Exception):
    """Ends a timed training run at the deadline."""


def time_training(run: Callable[[list], object], device: torch.device, options: Options) -> Timing:
    """The steps of one training run `run(callbacks)`, timed one by one by its loop (synchronised
    around every step): the first two (warm-up, capture) as the first call, then `options.calls`."""
    clocks: list[Clock] = []
    cpu = [time.process_time()]

    def clock(end: StepEnd) -> None:
        now = time.process_time()
        clocks.append(Clock(end.seconds, now - cpu[0]))
        cpu[0] = now
        if len(clocks) > 2 and late(options):
            raise _Enough

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with contextlib.suppress(_Enough):
        run([clock])
    first = Clock(sum(c.wall for c in clocks[:2]), sum(c.cpu for c in clocks[:2]))
    return Timing(first, clocks[2:], peak_gib(device))


def train_steps(model, task: Task, options: Options, **config) -> Callable[[list], object]:
    """`train_mask` of 2 + `options.calls` steps (the paper's recipe otherwise), quiet."""

    def run(callbacks: list):
        with warnings.catch_warnings():  # a few steps remove no head, as the library warns
            warnings.simplefilter("ignore")
            steps = TrainConfig(steps=2 + options.calls, checkpoint_every=0, progress=False, **config)
            return train_mask(model, task, steps, callbacks=callbacks)

    return run


def task_for(options: Options, n_train: int = 16) -> Task:
    """The benchmark's task (`reverse`: a made-up word task that needs no data, also used when the
    task's data is missing); its training split is exactly 16 pairs, so every step sees one batch."""
    task = word_task()
    if options.task != "reverse":
        try:
            task = load_task(options.task)
        except ValueError as error:
            note(f"{error}; using a made-up word task instead")
    pairs = list(task.pairs)
    evaluation = [pairs[i] for i in task.split_indices("eval")][: options.eval_examples]
    training = [pairs[i] for i in task.split_indices("train")][:n_train]
    return Task.from_pairs(task.name, training + evaluation, n_eval=len(evaluation))


def run_loops(section: str, loops: dict[str, Callable[[], Timing]], options: Options) -> dict[str, Timing]:
    """The library's loop, then each of `--versus` that applies to `section`, in that order; a loop
    that fails (a compiler, say) is reported and left out, a loop past the deadline is skipped."""
    timings: dict[str, Timing] = {}
    wanted = ["library", *(v for v in options.versus if section in LOOPS[v] and v in loops)]
    for name in wanted:
        if late(options) and name != "library":
            note(f"{section}: {name} skipped (deadline)")
            continue
        try:
            timings[name] = loops[name]()
        except Exception as error:  # a failed baseline must not lose the rest of the run
            note(f"{section}: {name} failed: {type(error).__name__}: {error}")
            traceback.print_exc()
            if name == "library":
                raise
            continue
        t = timings[name]
        note(
            f"{section}: {name} first call {t.first.wall:.2f} s, then median "
            f"{statistics.median(c.wall for c in t.clocks):.4f} s of {len(t.clocks)} calls"
        )
    return timings


# ------------------------------------------------------------------------------------------------ sweep


def sequential_sweep(model, ids: torch.Tensor, order, steps: list[int], new_tokens: int):
    """The reference: one forward pass and one `model.generate` per step, through the bridge's hooks."""
    logits, texts = [], []
    with direct_path(False):
        for step in steps:
            with torch.no_grad(), value_gate(model, HeadMask.from_heads(order[:step], model)):
                logits.append(model(ids)[0, -1].float().cpu())
                out = model.generate(
                    ids, max_new_tokens=new_tokens, do_sample=False, verbose=False, return_type="tokens"
                )
            texts += cut_at_stop(out[:, ids.shape[1] :].tolist(), stop_token_ids(model))
    return torch.stack(logits), texts


def library_variants(call: Callable[[], object]) -> dict[str, Callable[[], object]]:
    """The library's `call` as is and under each of its loops of `--versus` (sweep and evaluation)."""

    def under(**kwargs) -> Callable[[], object]:
        def run():
            with native_options(**kwargs):
                return call()

        return run

    def bridge():
        with direct_path(False):
            return call()

    return {
        "library": call,
        "library-eager-steps": under(cuda_graph=False),
        "library-compiled-steps": under(compile=True),
        "library-bridge": bridge,
    }


def sweep_section(model, plain: PlainModel, options: Options) -> dict:
    device = torch.device(model.cfg.device)
    order = random_order(model, seed=0)[: options.sweep_steps - 1]
    rows = len(order) + 1
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(options.prompt), add_bos=template.add_bos)], device=device)
    masks = sweep_masks(order, list(range(rows)), (model.cfg.n_layers, model.cfg.n_heads))
    stops, pad = stop_token_ids(model), pad_token_id(model)
    batch = ids.expand(rows, -1).contiguous()

    def ours():
        return removal_sweep(model, options.prompt, order, max_new_tokens=options.new_tokens)

    calls: dict[str, Callable[[], object]] = {
        **library_variants(ours),
        "plain-static-compiled": lambda: plain.generate_static(batch, None, masks, options.new_tokens, stops, pad),
        "plain-eager": lambda: plain.greedy(batch, None, masks, options.new_tokens, stops),
    }
    timings = run_loops("sweep", {k: lambda fn=fn: time_calls(fn, device, options) for k, fn in calls.items()}, options)
    sweep = timings["library"].out
    picks = sorted(
        {round(i * (rows - 1) / max(1, options.sequential_steps - 1)) for i in range(options.sequential_steps)}
    )
    seq_logits, seq_texts = sequential_sweep(model, ids, order, picks, options.new_tokens)
    tracked = torch.tensor(sweep.tokens.token_id.tolist())
    seq_ranks = (seq_logits[:, None, :] > seq_logits[:, tracked][:, :, None]).sum(-1) + 1
    ours_logits = torch.tensor(sweep.logits[sweep.tokens.label].to_numpy(), dtype=torch.float32)
    checks = {
        f"equal to the sequential reference ({len(picks)} steps)": (
            [sweep.generation_ids[s] for s in picks] == seq_texts
            and seq_ranks.tolist() == sweep.ranks[sweep.tokens.label].to_numpy()[picks].tolist()
        )
    }
    per_loop: dict[str, dict] = {}
    for name in ("plain-static-compiled", "plain-eager"):
        if name not in timings:
            continue
        if name == "plain-eager":
            tokens, first = timings[name].out
        else:  # the same call once more, asking for the prompt pass's logits
            tokens, first = plain.generate_static(batch, None, masks, options.new_tokens, stops, pad, first_logits=True)
        same = [a == b for a, b in zip(sweep.generation_ids, tokens)]
        tracked_plain = first[:, tracked]
        per_loop[name] = {
            "checks": {f"equal to {name}": all(same)},
            "agreement": {
                f"rows equal to {name}": sum(same) / len(same),
                "tracked logits, max |diff| / max |logit|": float(
                    (ours_logits - tracked_plain).abs().max() / tracked_plain.abs().max().clamp(min=1e-6)
                ),
            },
        }
    work = f"{rows} steps x {options.new_tokens} tokens, prompt {ids.shape[1]} tokens"
    return {"work": work, "timings": timings, "checks": checks, "per_loop": per_loop}


# ------------------------------------------------------------------------------------------------ evaluation


def eval_section(model, plain: PlainModel, options: Options, task: Task) -> dict:
    device = torch.device(model.cfg.device)
    stops, pad = stop_token_ids(model), pad_token_id(model)
    users, shots, answers = task_prompts(task, "eval")
    prompts = [encode_prompt(model, u, s) for u, s in zip(users, shots)]
    loss_rows = encode_pairs(model, list(zip(users, answers)), shots=shots)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # as generate_answers batches them
    chunks = [order[start : start + 16] for start in range(0, len(order), 16)]
    groups = length_batches(model, loss_rows, max_rows=16)
    # One cache length and one loss width for every batch: one compilation per batch size.
    cache_length = max(len(p) for p in prompts) + options.eval_new_tokens
    loss_width = max(len(p) + len(a) for p, a in loss_rows)

    def ours():  # the library's entry point: one setting of `evaluate` (generations and answer loss)
        config = EvalConfig(settings=("original",), max_new_tokens=options.eval_new_tokens, progress=False)
        result = evaluate(model, task, None, config)
        return list(result.generations.sort_values("example")["output"]), float(result.table["answer_nll"].iloc[0])

    def plain_eval(best: bool):
        texts = [""] * len(prompts)
        for chunk in chunks:
            ids, attention = left_pad([prompts[i] for i in chunk], pad_id=pad, device=device)
            if best:
                tokens, _ = plain.generate_static(
                    ids, attention, None, options.eval_new_tokens, stops, pad, length=cache_length
                )
            else:
                tokens, _ = plain.greedy(
                    ids, attention if not bool(attention.all()) else None, None, options.eval_new_tokens, stops
                )
            for i, t in zip(chunk, tokens):
                texts[i] = model.tokenizer.decode(t, skip_special_tokens=True)
        sums = torch.zeros(len(loss_rows), dtype=torch.float64)
        with torch.no_grad():
            for group in groups:
                members = [loss_rows[i] for i in group]
                nll, owner = (
                    plain.compiled_nll(members, pad, loss_width) if best else plain.answer_nll(members, None, pad)
                )
                sums.index_add_(0, torch.tensor(group)[owner.cpu()], nll.double().cpu())
        per_example = [float(sums[i]) / len(answer) for i, (_, answer) in enumerate(loss_rows)]
        return texts, sum(per_example) / len(per_example)

    calls: dict[str, Callable[[], object]] = {
        **library_variants(ours),
        "plain-static-compiled": lambda: plain_eval(best=True),
        "plain-eager": lambda: plain_eval(best=False),
    }
    timings = run_loops("eval", {k: lambda fn=fn: time_calls(fn, device, options) for k, fn in calls.items()}, options)
    texts, loss = timings["library"].out
    picks = list(range(min(options.sequential_steps, len(prompts))))
    sequential = []
    with direct_path(False), torch.no_grad():
        for i in picks:
            out = model.generate(
                torch.tensor([prompts[i]], device=device),
                max_new_tokens=options.eval_new_tokens,
                do_sample=False,
                verbose=False,
                return_type="tokens",
            )
            new = cut_at_stop(out[:, len(prompts[i]) :].tolist(), stops)[0]
            sequential.append(model.tokenizer.decode(new, skip_special_tokens=True))
    checks = {
        f"outputs equal to the sequential reference ({len(picks)} examples)": [texts[i] for i in picks] == sequential
    }
    per_loop: dict[str, dict] = {}
    for name in ("plain-static-compiled", "plain-eager"):
        if name not in timings:
            continue
        plain_texts, plain_loss = timings[name].out
        per_loop[name] = {
            "checks": {
                f"outputs equal to {name}": texts == plain_texts,
                f"answer loss equal to {name} (rel. {tolerance(model) / 10:g})": abs(loss - plain_loss)
                <= tolerance(model) / 10 * abs(plain_loss),
            },
            "agreement": {
                f"outputs equal to {name}": sum(a == b for a, b in zip(texts, plain_texts)) / len(texts),
                "answer loss, |diff| / loss": abs(loss - plain_loss) / abs(plain_loss),
            },
        }
    work = f"{len(prompts)} examples, {options.eval_new_tokens} new tokens + answer loss, batches of 16"
    return {"work": work, "timings": timings, "checks": checks, "per_loop": per_loop}


# ------------------------------------------------------------------------------------------------ training


def mask_gradient(model, plain: PlainModel | None, rows, groups, pad: int) -> torch.Tensor:
    """The gradient of the answer loss with respect to per-row mask logits at the paper's init, fixed noise."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    device = torch.device(model.cfg.device)
    logits = torch.full((len(rows), n_layers, n_heads), 4.0, device=device, requires_grad=True)
    noise = left_tail_gumbel((len(rows), n_layers, n_heads), torch.Generator().manual_seed(0)).to(device)
    n_answers = sum(len(answer) for _, answer in rows)
    if plain is not None:
        plain.train_step(rows, groups, logits, noise, 4.0, pad)
        return logits.grad.float().cpu()
    for group in groups:
        masks = straight_through(logits[group], noise[group], 4.0)
        batch = collate([rows[i] for i in group], pad_id=pad, device=device)
        nll, _ = answer_nll(model, batch, gate_hooks(model, masks))
        (nll.sum() / n_answers).backward()
    return logits.grad.float().cpu()


def first_layer_tokens(fn, model) -> int:
    """Tokens the first layer's output projection computes while `fn()` runs (the library's passes)."""
    seen: list[int] = []
    handle = raw_module(model.blocks[0].attn.o).register_forward_pre_hook(
        lambda module, args: seen.append(args[0].shape[:-1].numel())
    )
    try:
        fn()
    finally:
        handle.remove()
    return sum(seen)


def train_section(model, plain: PlainModel, options: Options, task: Task) -> dict:
    device = torch.device(model.cfg.device)
    pad = pad_token_id(model)
    rows = encode_pairs(model, [task.pairs[i] for i in task.split_indices("train")])
    groups = length_batches(model, rows)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    logits = torch.full((len(rows), n_layers, n_heads), 4.0, device=device, requires_grad=True)
    noise = left_tail_gumbel((len(rows), n_layers, n_heads), torch.Generator().manual_seed(0)).to(device)
    fixed: dict[str, torch.Tensor] = {}  # the fixed-shape plain steps' gradients

    def plain_fixed(how: str) -> Callable[[], Timing]:
        def timing() -> Timing:
            step = plain.fixed_step(rows, logits, noise, 4.0, pad, how)
            out = time_calls(step, device, options)
            fixed[how] = step().float().cpu().clone()
            return out

        return timing

    def bridge_steps(callbacks: list):
        with direct_path(False):
            return train_steps(model, task, options)(callbacks)

    def packed_steps(callbacks: list):
        with native_options(pack_rows=True):
            return train_steps(model, task, options, cuda_graph=True)(callbacks)

    loops: dict[str, Callable[[], Timing]] = {
        "library": lambda: time_training(train_steps(model, task, options), device, options),
        "library-eager-train": lambda: time_training(
            train_steps(model, task, options, cuda_graph=False), device, options
        ),
        "library-packed-train": lambda: time_training(packed_steps, device, options),
        "library-bridge": lambda: time_training(bridge_steps, device, options),
        "library-own-fwd-bwd": lambda: time_calls(
            lambda: mask_gradient(model, None, rows, groups, pad), device, options
        ),
        "plain-compiled": plain_fixed("compiled"),
        "plain-captured": plain_fixed("captured"),
        "plain-eager": lambda: time_calls(
            lambda: plain.train_step(rows, groups, logits, noise, 4.0, pad), device, options
        ),
    }
    timings = run_loops("train", loops, options)
    ours_grad = mask_gradient(model, None, rows, groups, pad)
    plain_grad = mask_gradient(model, plain, rows, groups, pad)
    with direct_path(False):
        bridge_grad = mask_gradient(model, None, rows, groups, pad)
    with native_options(pack_rows=True):
        packed_grad = mask_gradient(model, None, rows, groups, pad)
        packed_tokens = first_layer_tokens(lambda: mask_gradient(model, None, rows, groups, pad), model)
    scale = max(float(plain_grad.abs().max()), 1e-30)
    tol = tolerance(model)

    def close(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool((a - b).abs().max() <= tol * scale)

    checks = {
        f"mask gradient equal to plain transformers' ({tol:g} of its largest entry)": close(ours_grad, plain_grad),
        f"mask gradient equal to the bridge's ({tol:g} of its largest entry)": close(ours_grad, bridge_grad),
        f"packed passes' mask gradient equal to plain transformers' ({tol:g} of its largest entry)": close(
            packed_grad, plain_grad
        ),
    }
    agreement = {"mask gradient, max |diff| / max |gradient|": float((ours_grad - plain_grad).abs().max()) / scale}
    per_loop = {
        f"plain-{how}": {
            "checks": {f"plain's {how} fixed-shape step's gradient equal to its eager one": close(grad, plain_grad)},
            "agreement": {
                **agreement,
                f"plain-{how} against plain-eager, max |diff| / max |gradient|": float((grad - plain_grad).abs().max())
                / scale,
            },
        }
        for how, grad in fixed.items()
    }
    tokens = sum(len(p) + len(a) for p, a in rows)
    # What a layer computes: plain pads each pass to its longest row, the library's packed passes drop
    # the padding and every row's last token. Where both run at the same rate, the ratio of the two
    # bounds the step's speed-up (the last layer's cut and the unembedding aside).
    padded = sum(len(group) * max(len(rows[i][0]) + len(rows[i][1]) for i in group) for group in groups)
    computed = first_layer_tokens(lambda: mask_gradient(model, None, rows, groups, pad), model)
    work = (
        f"batch {len(rows)} ({tokens} tokens, {len(groups)} pass(es); a layer computes {computed} tokens, "
        f"packed {packed_tokens}, plain {padded}), paper recipe, answer-only loss"
    )
    return {"work": work, "timings": timings, "checks": checks, "agreement": agreement, "per_loop": per_loop}


# ------------------------------------------------------------------------------------------------ memory


def memory_section(model, options: Options, task: Task) -> dict | None:
    """Peak GPU memory of `train_mask` steps over the weights' bytes, with and without checkpointing."""
    device = torch.device(model.cfg.device)
    if device.type != "cuda":
        return None
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])

    def own_peak(checkpointing: bool) -> float:
        config = TrainConfig(
            steps=2, checkpoint_every=0, progress=False, activation_checkpointing=checkpointing, log_every=2
        )
        torch.cuda.synchronize(device)
        others = torch.cuda.memory_allocated(device) - weights  # the plain model, caches: not the library's
        torch.cuda.reset_peak_memory_stats(device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train_mask(model, task, config)
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - others) / 2**30

    plain_peak, kept_peak = own_peak(False), own_peak(True)
    gib = weights / 2**30
    return {
        "weights_gib": gib,
        "peak_gib": plain_peak,
        "peak_checkpointing_gib": kept_peak,
        "ratio": plain_peak / gib,
        "ratio_checkpointing": kept_peak / gib,
    }


# ------------------------------------------------------------------------------------------------ tables


def tolerance(model) -> float:
    """How close two computations of one gradient must be: fp32 rounding, or bf16's 8-bit mantissa."""
    return 1e-3 if model.cfg.dtype == torch.float32 else 3e-2


def quantile(values: list[float], q: float) -> float:
    return float(torch.tensor(values, dtype=torch.float64).quantile(q))


def summary_rows(name: str, dtype: str, section: str, result: dict) -> list[dict]:
    """One row per loop timed beside the library's: their clocks and ratio, and what was checked."""
    timings: dict[str, Timing] = result["timings"]
    ours = timings["library"]
    mine = [c.wall for c in ours.clocks]
    rows = []
    for other, theirs in timings.items():
        if other == "library":
            continue
        walls = [c.wall for c in theirs.clocks]
        loop = result.get("per_loop", {}).get(other, {})
        checks = {**result["checks"], **loop.get("checks", {})}
        agreement = {**result.get("agreement", {}), **loop.get("agreement", {})}
        rows.append(
            {
                "model": name,
                "dtype": dtype,
                "section": section,
                "work": result["work"],
                "versus": other,
                "calls": min(len(mine), len(walls)),
                "library_s": statistics.median(mine),
                "library_min_s": min(mine),
                "library_max_s": max(mine),
                "other_s": statistics.median(walls),
                "other_min_s": min(walls),
                "other_max_s": max(walls),
                "library_first_s": ours.first.wall,
                "other_first_s": theirs.first.wall,
                "ratio_wall": statistics.median(walls) / statistics.median(mine),
                "ratio_wall_min": quantile(walls, 0.25) / quantile(mine, 0.75),
                "ratio_wall_max": quantile(walls, 0.75) / quantile(mine, 0.25),
                "ratio_cpu": statistics.median(c.cpu for c in theirs.clocks)
                / max(statistics.median(c.cpu for c in ours.clocks), 1e-12),
                "library_peak_gib": ours.peak,
                "other_peak_gib": theirs.peak,
                "identical": all(checks.values()),
                "agreement": "; ".join(f"{k}: {v:.4g}" for k, v in agreement.items()),
            }
        )
    return rows


def report(name: str, section: str, result: dict) -> None:
    timings: dict[str, Timing] = result["timings"]
    print(f"[{name}] {section}: {result['work']}")
    for loop, t in timings.items():
        walls = [c.wall for c in t.clocks]
        memory = f", peak GPU memory {t.peak:.2f} GiB" if t.peak is not None else ""
        print(
            f"    {loop:24s} {statistics.median(walls):.4f} [{min(walls):.4f}-{max(walls):.4f}] s wall "
            f"over {len(walls)} calls; first call {t.first.wall:.2f} s{memory}"
        )
    mine = statistics.median(c.wall for c in timings["library"].clocks)
    for loop, t in timings.items():
        if loop != "library":
            print(f"    {loop} / library: {statistics.median(c.wall for c in t.clocks) / mine:.2f}x wall")
    checks = {**result["checks"]}
    for loop in result.get("per_loop", {}).values():
        checks |= loop["checks"]
    for check, ok in checks.items():
        print(f"    {check}: {ok}")


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="performance.py", description=__doc__)
    unknown = set(options.sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    if set(options.versus) - set(LOOPS):
        raise SystemExit(f"unknown loops {sorted(set(options.versus) - set(LOOPS))}; choose from {list(LOOPS)}")
    if options.calls < 1:
        raise SystemExit("--calls must be at least 1")
    torch.set_num_threads(options.threads)
    os.environ["HEADSUP_PROGRESS"] = "0"  # the library's bars would be timed with its loops
    switches = (
        ("--prefix-sharing", options.prefix_sharing),
        ("--cuda-graph", options.cuda_graph),
        ("--pack-rows", options.pack_rows),
    )
    for flag, value in switches:
        if value not in ("auto", "on", "off"):
            raise SystemExit(f"{flag} must be auto, on or off, not {value!r}")
    rows, raw, memory = [], {}, []
    levers = native_options(
        prefix_sharing=None if options.prefix_sharing == "auto" else options.prefix_sharing == "on",
        static_cache=options.static_cache,
        cuda_graph=None if options.cuda_graph == "auto" else options.cuda_graph == "on",
        pack_rows=None if options.pack_rows == "auto" else options.pack_rows == "on",
    )
    with tempfile.TemporaryDirectory() as scratch, levers:
        for name in options.models:
            if late(options):
                note(f"{name} skipped (deadline)")
                continue
            model, directory = load(name, Path(scratch), options.device, options.dtype)
            device = torch.device(model.cfg.device)
            plain = PlainModel(directory, device, model.cfg.dtype, backend=options.compile_backend)
            cfg = model.cfg
            print(
                f"[{label(name)}] {cfg.n_layers} layers x {cfg.n_heads} heads, d_model {cfg.d_model}, vocab {cfg.d_vocab}, "
                f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, {cfg.dtype} on {device}"
                + (
                    f", {options.threads} thread(s)"
                    if device.type == "cpu"
                    else f", {torch.cuda.get_device_name(device)}"
                )
                + f"; median [min-max] of {options.calls} synchronised calls per loop"
            )
            task = task_for(options) if {"eval", "train", "memory"} & set(options.sections) else None
            dtype = str(cfg.dtype).removeprefix("torch.")
            for section in options.sections:
                if late(options):
                    note(f"{name} {section} skipped (deadline)")
                    continue
                if section == "memory":
                    found = memory_section(model, options, task)
                    if found is not None:
                        print(f"[{label(name)}] memory: " + ", ".join(f"{k} {v:.2f}" for k, v in found.items()))
                        memory.append({"model": label(name), "dtype": dtype, **found})
                        write(options, rows, raw, memory)
                    continue
                if section == "sweep":
                    result = sweep_section(model, plain, options)
                elif section == "eval":
                    result = eval_section(model, plain, options, task)
                else:
                    result = train_section(model, plain, options, task)
                report(label(name), section, result)
                rows += summary_rows(label(name), dtype, section, result)
                raw[f"{name}/{section}"] = {
                    "work": result["work"],
                    "checks": result["checks"],
                    "per_loop": result.get("per_loop", {}),
                    "clocks": {
                        k: {"first": asdict(t.first), "calls": [asdict(c) for c in t.clocks], "peak_gib": t.peak}
                        for k, t in result["timings"].items()
                    },
                }
                write(options, rows, raw, memory)
            del model, plain
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    table = pd.DataFrame(rows)
    print()
    if len(table):
        print(
            table[["model", "section", "versus", "calls", "ratio_wall", "ratio_cpu", "identical"]].to_string(
                index=False, float_format=lambda v: f"{v:.2f}"
            )
        )
    if options.out is not None:
        print(f"wrote {Path(options.out) / 'performance.csv'} and {Path(options.out) / 'performance.json'}")
    # In bf16 two kernels round differently (a near tie can turn a greedy token): only fp32 fails the run.
    strict = table[table.dtype == "float32"] if len(table) else table
    return 0 if all(strict.identical) else 1


def write(options: Options, rows: list[dict], raw: dict, memory: list[dict]) -> None:
    """The tables so far (after every section: a run cut short keeps what it measured)."""
    if options.out is None:
        return
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "performance.csv", index=False)
    if memory:
        pd.DataFrame(memory).to_csv(out / "memory.csv", index=False)
    (out / "performance.json").write_text(
        json.dumps({"options": asdict(options), "results": raw}, indent=1, default=str)
    )


if __name__ == "__main__":
    sys.exit(main())
