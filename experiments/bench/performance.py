"""Benchmark: the library's removal sweep, batched evaluation and mask-training step against plain
`transformers` doing the same work, on the same weights, in one run.

For each model (`--models`: SmolLM2's real weights and random weights at the Qwen2.5-0.5B shape by
default) and each section, the library's loop and the plain-transformers loop (`_plain.PlainModel`:
the model's own Hugging Face class, per-row head masks multiplied into every `o_proj` input by
forward pre-hooks) run interleaved, `--repeats` times; the median [min-max] of each and of the
ratio plain / library (> 1: the library is faster) are printed, per wall second and per CPU second
of this process (the CPU-time ratio holds up when other processes share the cores).
- sweep: `removal_sweep` over `--sweep-steps` steps of a random order, `--new-tokens` greedy tokens
  each, vs batched greedy decoding of the same rows (one logit per row and pass, rows dropped at
  their stop token). Checked: equal generations, and ranks and generations equal to the sequential
  reference (one forward pass and one `model.generate` per step through the bridge's hooks) on
  `--sequential-steps` steps.
- eval: `evaluate` with one setting (original: greedy outputs and the answer loss, batches of 16)
  on `--eval-examples` held-out examples vs greedy decoding and a loss pass of the same batches in
  plain transformers; checked: equal outputs and losses, and outputs equal to
  per-example `model.generate` through the bridge on `--sequential-steps` examples.
- train: one `train_mask` step of the paper's recipe (batch 16, answer-only loss), timed as
  (time of 2 + N steps - time of 2 steps) / N, vs the same rows' forward and backward in plain
  transformers, and vs the library's own forward and backward of those rows alone (the row
  "the library's forward and backward alone": its ratio r says the step's overhead, 1 / r - 1);
  checked: the mask gradient equals plain transformers' and the bridge's.
- memory (a GPU only): peak GPU memory of two `train_mask` steps with and without activation
  checkpointing, over the bytes of the model's weights (what the library's model holds besides
  its weights; the plain model loaded beside it is not counted).
`--bridge` also times the library with its direct forward pass turned off (`gates.direct_path`);
`--eager-steps` times its sweep and evaluation with the decoding step launched op by op instead of
replayed as a captured CUDA graph (`native_options(cuda_graph=False)`; a GPU only); `--graphed-train`
times its training step captured as a CUDA graph (`TrainConfig(cuda_graph=True)`; the row's ratio is
captured / default, < 1 where the capture is faster; on the CPU the same fixed-shape step runs eagerly;
on a GPU the default captures it where it serves, so the row times the default again); `--eager-train`
times its training step with the capture off (`TrainConfig(cuda_graph=False)`; on a GPU: what the
capture wins; on the CPU the default step again);
`--packed-train` times its length-grouped training step with the loss passes packed
(`native_options(pack_rows=True)`, `TrainConfig(cuda_graph=False)`: the CPU's default; on a GPU the
row's ratio is packed / default, < 1 where packing is faster) and checks that step's mask gradient too.
The tables are written after every section, so a run cut short keeps what it measured.
On CUDA the models run in bf16 (unless `--dtype`) and each loop's `torch.cuda.max_memory_allocated`
is printed.

    python experiments/bench/performance.py                         # everything, 3 repeats, 1 thread
    python experiments/bench/performance.py --models smollm2 --sections sweep --repeats 5
    python experiments/bench/performance.py --out figures/bench     # also performance.csv / .json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import warnings
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
from headsup_lens.training import TrainConfig, left_tail_gumbel, straight_through, train_mask

SECTIONS = ("sweep", "eval", "train", "memory")


@dataclass
class Options:
    """Options of the benchmark."""

    models: list[str] = field(default_factory=lambda: ["smollm2", "qwen0.5b"])
    """Models: `smollm2`, `organism`, a Hugging Face directory, or a shape with random weights (`qwen0.5b`, `qwen1.5b`)."""
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    """Which loops to time: sweep, eval, train."""
    repeats: int = 3
    """Interleaved repeats of every timing (the median is reported)."""
    threads: int = 1
    """torch CPU threads (1: the numbers hold on a machine whose cores others share too)."""
    device: str | None = None
    """Device (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""
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
    train_steps: int = 4
    """N: a training step is timed as (time of 2 + N steps - time of 2 steps) / N."""
    bridge: bool = False
    """Also time the library with its direct forward pass turned off (the bridge's hook points)."""
    prefix_sharing: str = "auto"
    """Greedy decoding shares prompt prefixes across rows (the direct pass): auto (on the CPU only), on, off."""
    static_cache: bool = False
    """A static KV cache in the library's greedy decoding (`native_options(static_cache=True)`)."""
    compile: bool = False
    """`torch.compile` the library's decoding step (`native_options(compile=True)`)."""
    cuda_graph: str = "auto"
    """Replay the library's decoding step as a captured CUDA graph: auto (on a GPU), on, off."""
    pack_rows: str = "auto"
    """Loss passes pack their right-padded rows into one sequence (`native_options(pack_rows=...)`): auto (on the CPU only), on, off."""
    eager_steps: bool = False
    """Also time the library's sweep and evaluation with the CUDA graph off (`native_options(cuda_graph=False)`)."""
    graphed_train: bool = False
    """Also time the library's training step captured as a CUDA graph (`TrainConfig(cuda_graph=True)`)."""
    eager_train: bool = False
    """Also time the library's training step with the CUDA graph off (`TrainConfig(cuda_graph=False)`)."""
    packed_train: bool = False
    """Also time the library's training step with packed loss passes (`native_options(pack_rows=True)`)."""
    out: str | None = None
    """Folder for performance.csv and performance.json (e.g. figures/bench); nothing is written without it."""


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def run(fn, device: torch.device) -> tuple[Clock, object, float | None]:
    """`fn()` timed, with its peak GPU memory (None on the CPU)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    clock, out = timed(fn, device=device)
    return clock, out, peak_gib(device)


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


def sweep_section(model, plain: PlainModel, options: Options) -> dict:
    device = torch.device(model.cfg.device)
    order = random_order(model, seed=0)[: options.sweep_steps - 1]
    rows = len(order) + 1
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(options.prompt), add_bos=template.add_bos)], device=device)
    masks = sweep_masks(order, list(range(rows)), (model.cfg.n_layers, model.cfg.n_heads))
    stops = stop_token_ids(model)

    def ours():
        return removal_sweep(model, options.prompt, order, max_new_tokens=options.new_tokens)

    def bridge():
        with direct_path(False):
            return ours()

    def eager():
        with native_options(cuda_graph=False):
            return ours()

    def reference():
        return plain.greedy(ids.expand(rows, -1).contiguous(), None, masks, options.new_tokens, stops)

    # Warm-up at the timed shapes: the first pass at a new batch shape pays for kernel selection and
    # the allocator's growth, which would land on whichever loop runs first.
    ours()
    reference()
    clocks = new_clocks()
    peaks: dict[str, float | None] = {}
    for repeat in range(options.repeats):
        loops = [("library", ours), ("plain", reference), *extra(options, bridge=bridge, eager=eager)]
        for name, fn in loops if repeat % 2 == 0 else loops[::-1]:  # alternate which goes first
            clock, out, peaks[name] = run(fn, device)
            clocks[name].append(clock)
            if name == "library":
                sweep = out
            elif name == "plain":
                plain_tokens, plain_first = out
        note(
            f"sweep repeat {repeat + 1}/{options.repeats}: "
            + ", ".join(f"{k} {v[-1].wall:.1f} s" for k, v in clocks.items() if v)
        )
    picks = sorted(
        {round(i * (rows - 1) / max(1, options.sequential_steps - 1)) for i in range(options.sequential_steps)}
    )
    seq_logits, seq_texts = sequential_sweep(model, ids, order, picks, options.new_tokens)
    tracked = torch.tensor(sweep.tokens.token_id.tolist())
    seq_ranks = (seq_logits[:, None, :] > seq_logits[:, tracked][:, :, None]).sum(-1) + 1
    same_rows = [a == b for a, b in zip(sweep.generation_ids, plain_tokens)]
    tracked_plain = plain_first[:, tracked]
    ours_logits = torch.tensor(sweep.logits[sweep.tokens.label].to_numpy(), dtype=torch.float32)
    agreement = {
        "rows equal to plain transformers": sum(same_rows) / len(same_rows),
        "tracked logits, max |diff| / max |logit|": float(
            (ours_logits - tracked_plain).abs().max() / tracked_plain.abs().max().clamp(min=1e-6)
        ),
    }
    checks = {
        "equal to plain transformers": sweep.generation_ids == plain_tokens,
        f"equal to the sequential reference ({len(picks)} steps)": (
            [sweep.generation_ids[s] for s in picks] == seq_texts
            and seq_ranks.tolist() == sweep.ranks[sweep.tokens.label].to_numpy()[picks].tolist()
        ),
    }
    work = f"{rows} steps x {options.new_tokens} tokens, prompt {ids.shape[1]} tokens"
    return {"work": work, "clocks": clocks, "peaks": peaks, "checks": checks, "agreement": agreement}


# ------------------------------------------------------------------------------------------------ evaluation


def eval_section(model, plain: PlainModel, options: Options, task: Task) -> dict:
    device = torch.device(model.cfg.device)
    stops, pad = stop_token_ids(model), pad_token_id(model)
    users, shots, answers = task_prompts(task, "eval")
    prompts = [encode_prompt(model, u, s) for u, s in zip(users, shots)]
    loss_rows = encode_pairs(model, list(zip(users, answers)), shots=shots)

    def ours():  # the library's entry point: one setting of `evaluate` (generations and answer loss)
        config = EvalConfig(settings=("original",), max_new_tokens=options.eval_new_tokens, progress=False)
        result = evaluate(model, task, None, config)
        return list(result.generations.sort_values("example")["output"]), float(result.table["answer_nll"].iloc[0])

    def bridge():
        with direct_path(False):
            return ours()

    def eager():
        with native_options(cuda_graph=False):
            return ours()

    def reference():
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # as generate_answers batches them
        texts = [""] * len(prompts)
        for start in range(0, len(order), 16):
            chunk = order[start : start + 16]
            ids, attention = left_pad([prompts[i] for i in chunk], pad_id=pad, device=device)
            tokens, _ = plain.greedy(
                ids, attention if not bool(attention.all()) else None, None, options.eval_new_tokens, stops
            )
            for i, t in zip(chunk, tokens):
                texts[i] = model.tokenizer.decode(t, skip_special_tokens=True)
        sums = torch.zeros(len(loss_rows), dtype=torch.float64)
        with torch.no_grad():
            for group in length_batches(model, loss_rows, max_rows=16):
                nll, owner = plain.answer_nll([loss_rows[i] for i in group], None, pad)
                sums.index_add_(0, torch.tensor(group)[owner.cpu()], nll.double().cpu())
        per_example = [float(sums[i]) / len(answer) for i, (_, answer) in enumerate(loss_rows)]
        return texts, sum(per_example) / len(per_example)

    ours()  # warm-up of both at the timed shapes
    reference()
    clocks = new_clocks()
    peaks: dict[str, float | None] = {}
    for repeat in range(options.repeats):
        loops = [("library", ours), ("plain", reference), *extra(options, bridge=bridge, eager=eager)]
        for name, fn in loops if repeat % 2 == 0 else loops[::-1]:
            clock, out, peaks[name] = run(fn, device)
            clocks[name].append(clock)
            if name == "library":
                texts, loss = out
            elif name == "plain":
                plain_texts, plain_loss = out
        note(
            f"eval repeat {repeat + 1}/{options.repeats}: "
            + ", ".join(f"{k} {v[-1].wall:.1f} s" for k, v in clocks.items() if v)
        )
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
    agreement = {
        "outputs equal to plain transformers": sum(a == b for a, b in zip(texts, plain_texts)) / len(texts),
        "answer loss, |diff| / loss": abs(loss - plain_loss) / abs(plain_loss),
    }
    checks = {
        "outputs equal to plain transformers": texts == plain_texts,
        f"answer loss equal to plain transformers (rel. {tolerance(model) / 10:g})": abs(loss - plain_loss)
        <= tolerance(model) / 10 * abs(plain_loss),
        f"outputs equal to the sequential reference ({len(picks)} examples)": [texts[i] for i in picks] == sequential,
    }
    work = f"{len(prompts)} examples, {options.eval_new_tokens} new tokens + answer loss, batches of 16"
    return {"work": work, "clocks": clocks, "peaks": peaks, "checks": checks, "agreement": agreement}


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

    def steps(n: int, cuda_graph: bool | None = None):
        with warnings.catch_warnings():  # a few steps remove no head, as the library warns
            warnings.simplefilter("ignore")
            config = TrainConfig(steps=n, checkpoint_every=0, progress=False, cuda_graph=cuda_graph)
            return train_mask(model, task, config)

    def ours(cuda_graph: bool | None = None):
        # A captured step is captured at the second step, in both runs: the difference is N replays.
        short, _, _ = run(lambda: steps(2, cuda_graph), device)
        long, _, peak = run(lambda: steps(2 + options.train_steps, cuda_graph), device)
        n = options.train_steps
        return Clock((long.wall - short.wall) / n, (long.cpu - short.cpu) / n), peak

    def bridge():
        with direct_path(False):
            return ours()

    def graphed():
        return ours(cuda_graph=True)

    def eager_train():
        return ours(cuda_graph=False)

    def packed():  # the length-grouped step: the captured one never packs
        with native_options(pack_rows=True):
            return ours(cuda_graph=False)

    def own():  # the step's forward and backward alone, through the library: what the step adds to it
        clock, _, peak = run(lambda: mask_gradient(model, None, rows, groups, pad), device)
        return clock, peak

    def reference():
        logits = torch.full((len(rows), n_layers, n_heads), 4.0, device=device, requires_grad=True)
        noise = left_tail_gumbel((len(rows), n_layers, n_heads), torch.Generator().manual_seed(0)).to(device)
        clock, _, peak = run(lambda: plain.train_step(rows, groups, logits, noise, 4.0, pad), device)
        return clock, peak

    steps(2)  # warm-up
    reference()
    clocks = new_clocks()
    peaks: dict[str, float | None] = {}
    for repeat in range(options.repeats):
        loops = [
            ("library", ours),
            ("plain", reference),
            ("own", own),
            *extra(options, bridge=bridge, graphed=graphed, eager_train=eager_train, packed=packed),
        ]
        for name, fn in loops if repeat % 2 == 0 else loops[::-1]:
            clock, peaks[name] = fn()
            clocks[name].append(clock)
        note(
            f"train repeat {repeat + 1}/{options.repeats}: "
            + ", ".join(f"{k} {v[-1].wall:.2f} s" for k, v in clocks.items() if v)
        )
    ours_grad = mask_gradient(model, None, rows, groups, pad)
    plain_grad = mask_gradient(model, plain, rows, groups, pad)
    with direct_path(False):
        bridge_grad = mask_gradient(model, None, rows, groups, pad)
    with native_options(pack_rows=True):
        packed_grad = mask_gradient(model, None, rows, groups, pad)
        packed_tokens = first_layer_tokens(lambda: mask_gradient(model, None, rows, groups, pad), model)
    scale = float(plain_grad.abs().max())
    agreement = {
        "mask gradient, max |diff| / max |gradient|": float((ours_grad - plain_grad).abs().max()) / max(scale, 1e-30)
    }
    checks = {
        f"mask gradient equal to plain transformers ({tolerance(model):g} of its largest entry)": bool(
            (ours_grad - plain_grad).abs().max() <= tolerance(model) * scale
        ),
        f"mask gradient equal to the bridge's ({tolerance(model):g} of its largest entry)": bool(
            (ours_grad - bridge_grad).abs().max() <= tolerance(model) * scale
        ),
        f"packed passes' mask gradient equal to plain transformers' ({tolerance(model):g} of its largest entry)": bool(
            (packed_grad - plain_grad).abs().max() <= tolerance(model) * scale
        ),
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
    return {"work": work, "clocks": clocks, "peaks": peaks, "checks": checks, "agreement": agreement}


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


# ------------------------------------------------------------------------------------------------


VERSUS = {
    "plain": "plain transformers",
    "bridge": "library via the bridge's hooks",
    "eager": "library with eager decoding steps (no CUDA graph)",
    "graphed": "library with its training step captured as a CUDA graph",
    "eager_train": "library with its training step run eagerly (no CUDA graph)",
    "packed": "library with packed loss passes",
    "own": "the library's forward and backward alone",
}


def new_clocks() -> dict[str, list]:
    """Each loop's clocks, one per repeat: the library's and every loop of `VERSUS`."""
    return {"library": [], **{name: [] for name in VERSUS}}


def extra(options: Options, **loops) -> list:
    """The optional loops timed beside the library and plain transformers (`--bridge`, `--eager-steps`,
    `--graphed-train`, `--eager-train`, `--packed-train`)."""
    wanted = {
        "bridge": options.bridge,
        "eager": options.eager_steps,
        "graphed": options.graphed_train,
        "eager_train": options.eager_train,
        "packed": options.packed_train,
    }
    return [(name, fn) for name, fn in loops.items() if wanted[name]]


def tolerance(model) -> float:
    """How close two computations of one gradient must be: fp32 rounding, or bf16's 8-bit mantissa."""
    return 1e-3 if model.cfg.dtype == torch.float32 else 3e-2


def note(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def summary_rows(name: str, dtype: str, section: str, result: dict) -> list[dict]:
    clocks = result["clocks"]
    ours = clocks["library"]
    rows = []
    for other in VERSUS:
        if not clocks[other]:
            continue
        theirs = clocks[other]
        rows.append(
            {
                "model": name,
                "dtype": dtype,
                "section": section,
                "work": result["work"],
                "versus": VERSUS[other],
                "library_s": statistics.median(c.wall for c in ours),
                "other_s": statistics.median(c.wall for c in theirs),
                "ratio_wall": statistics.median(t.wall / o.wall for t, o in zip(theirs, ours)),
                "ratio_wall_min": min(t.wall / o.wall for t, o in zip(theirs, ours)),
                "ratio_wall_max": max(t.wall / o.wall for t, o in zip(theirs, ours)),
                "ratio_cpu": statistics.median(t.cpu / o.cpu for t, o in zip(theirs, ours)),
                "ratio_cpu_min": min(t.cpu / o.cpu for t, o in zip(theirs, ours)),
                "ratio_cpu_max": max(t.cpu / o.cpu for t, o in zip(theirs, ours)),
                "library_peak_gib": result["peaks"].get("library"),
                "other_peak_gib": result["peaks"].get(other),
                "identical": all(result["checks"].values()),
                "agreement": "; ".join(f"{k}: {v:.4g}" for k, v in result["agreement"].items()),
            }
        )
    return rows


def report(name: str, section: str, result: dict) -> None:
    clocks = result["clocks"]
    print(f"[{name}] {section}: {result['work']}")
    for loop, values in clocks.items():
        if values:
            peak = result["peaks"].get(loop)
            memory = f", peak GPU memory {peak:.2f} GiB" if peak is not None else ""
            print(
                f"    {loop:8s} {spread([c.wall for c in values])} s wall, {spread([c.cpu for c in values])} CPU s{memory}"
            )
    for other in VERSUS:
        if clocks[other]:
            ratio_wall = [t.wall / o.wall for t, o in zip(clocks[other], clocks["library"])]
            ratio_cpu = [t.cpu / o.cpu for t, o in zip(clocks[other], clocks["library"])]
            print(f"    {other} / library: {spread(ratio_wall)}x wall, {spread(ratio_cpu)}x CPU time")
    for check, ok in result["checks"].items():
        print(f"    {check}: {ok}")
    for what, value in result["agreement"].items():
        print(f"    {what}: {value:.4g}")


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="performance.py", description=__doc__)
    unknown = set(options.sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
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
        compile=options.compile,
        pack_rows=None if options.pack_rows == "auto" else options.pack_rows == "on",
    )
    with tempfile.TemporaryDirectory() as scratch, levers:
        for name in options.models:
            model, directory = load(name, Path(scratch), options.device, options.dtype)
            device = torch.device(model.cfg.device)
            plain = PlainModel(directory, device, model.cfg.dtype)
            cfg = model.cfg
            print(
                f"[{label(name)}] {cfg.n_layers} layers x {cfg.n_heads} heads, d_model {cfg.d_model}, vocab {cfg.d_vocab}, "
                f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, {cfg.dtype} on {device}"
                + (
                    f", {options.threads} thread(s)"
                    if device.type == "cpu"
                    else f", {torch.cuda.get_device_name(device)}"
                )
                + f"; median [min-max] of {options.repeats} interleaved repeats"
            )
            task = task_for(options) if {"eval", "train", "memory"} & set(options.sections) else None
            dtype = str(cfg.dtype).removeprefix("torch.")
            for section in options.sections:
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
                    **result,
                    "clocks": {k: [asdict(c) for c in v] for k, v in result["clocks"].items()},
                }
                write(options, rows, raw, memory)
            del model, plain
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    table = pd.DataFrame(rows)
    print()
    print(
        table[["model", "section", "versus", "ratio_wall", "ratio_cpu", "identical"]].to_string(
            index=False, float_format=lambda v: f"{v:.2f}"
        )
    )
    if options.out is not None:
        print(f"wrote {Path(options.out) / 'performance.csv'} and {Path(options.out) / 'performance.json'}")
    # In bf16 two kernels round differently (a near tie can turn a greedy token): only fp32 fails the run.
    strict = table[table.dtype == "float32"]
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
