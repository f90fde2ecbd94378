"""Benchmark at a real model shape: each loop's FLOP/s against this machine's plain matmul, and speed-ups.

For every dtype asked for (`--dtypes fp32,bf16`), in one process and on the same weights:
- **plain matmul** (always): the throughput of a plain `torch.matmul` of the model's MLP shape, the
  reference of every FLOP/s fraction (what this machine does on the matrices these loops are made of);
- **sweep**: `removal_sweep` over `--sweep-steps` steps (random order, `--new-tokens` greedy tokens) vs
  the plain sequential loop (one forward pass and one `generate` per step, what the reference code
  does) and vs the former batched path (`generate` on the batch, which unembeds every prompt position);
  the sequential loop is timed on `--sequential-steps` steps spread over the sweep and scaled to all of
  them (every step does the same work), and its ranks and generations are checked against the sweep;
- **evaluation**: `generate_answers` on K = `--eval-prompts` prompts, batched (one chunk) vs per example;
- **training**: one mask-training step (`train_mask`, batch 16), timed as the difference of two run
  lengths so setup cancels;
- **plain transformers** (with the sweep and training sections): the same work in the Hugging Face
  model class itself (same config, no bridge, no hooks, no masks): batched greedy decoding of the
  sweep's rows and a forward + input-gradient pass over the training step's rows. Its FLOP/s are
  what the framework's own layer code reaches on these shapes here, the ceiling of the loops above.
FLOP/s count the matmul work each loop needs (linear layers, attention scores and mixing, the
unembedded positions; backward = input gradients only, the model is frozen). Every ratio is measured
in this run; repeats are interleaved and reported as median [min-max], per wall second and per CPU
second of this process (the CPU-time ratios hold up when other processes share the cores; with
several threads they include time spent waiting for a descheduled thread). With several dtypes,
the sweep's ranks and generations are compared with the first dtype's.

    python experiments/bench_performance.py                          # Qwen2.5-0.5B shape, random weights
    python experiments/bench_performance.py --shape smollm2 --threads 2 --sweep-steps 40 --new-tokens 20
    python experiments/bench_performance.py --model organism --sections sweep
    python experiments/bench_performance.py --dtypes fp32,bf16 --sections sweep,train
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from headsup_lens import HeadMask, load_model, removal_sweep, value_gate
from headsup_lens.analysis import random_order
from headsup_lens.analysis._common import prompt_ids
from headsup_lens.evaluation import generate_answers
from headsup_lens.models import char_tokenizer, cut_at_stop, stop_token_ids

# Shapes of real models (random weights; the tokenizer is the character tokenizer, so prompts are
# about one token per character).
SHAPES = {
    "qwen0.5b": dict(
        arch="qwen2",
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        hidden_size=896,
        intermediate_size=4864,
        vocab_size=151_936,
        tie_word_embeddings=True,
    ),
    "smollm2": dict(
        arch="llama",
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        hidden_size=576,
        intermediate_size=1536,
        vocab_size=49_152,
        tie_word_embeddings=True,
    ),
    "organism": dict(
        arch="llama",
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        hidden_size=128,
        intermediate_size=384,
        vocab_size=58,
        tie_word_embeddings=False,
    ),
}
SECTIONS = ("sweep", "eval", "train")
# About 25 prompt tokens in the chat template, as in the measurements.
PROMPT = "the garden"


def build_random_dir(directory: str, shape: dict) -> str:
    """A randomly initialised model of `shape` with the character tokenizer, saved to `directory`."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    settings = dict(shape)
    arch = settings.pop("arch")
    tokenizer = char_tokenizer()
    settings.update(
        max_position_embeddings=2048, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    config_class, model_class = (Qwen2Config, Qwen2ForCausalLM) if arch == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    torch.manual_seed(0)
    model_class(config_class(**settings)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ----------------------------------------------------------------------------------------------
# FLOP model


@dataclass
class Flops:
    linear: int  # weights of the linear layers inside the blocks (one multiply-add per weight and token)
    unembed: int  # weights of the unembedding
    attention: int  # n_layers * n_heads * d_head: scores + mixing cost 4 * this * context per token

    @classmethod
    def of(cls, model) -> Flops:
        hf = model.original_model
        head = hf.get_output_embeddings().weight
        seen, linear = {id(head)}, 0
        for module in hf.modules():
            if isinstance(module, nn.Linear) and id(module.weight) not in seen:
                seen.add(id(module.weight))
                linear += module.weight.numel()
        cfg = model.cfg
        return cls(linear=linear, unembed=head.numel(), attention=cfg.n_layers * cfg.n_heads * cfg.d_head)

    def prompt(self, tokens: int, unembedded: int = 1) -> float:
        """A prompt pass over `tokens` positions (eager attention computes the full square)."""
        return 2.0 * self.linear * tokens + 4.0 * self.attention * tokens * tokens + 2.0 * self.unembed * unembedded

    def cached(self, context: int) -> float:
        """One cached decoding pass of one new token seeing `context` positions."""
        return 2.0 * self.linear + 4.0 * self.attention * context + 2.0 * self.unembed

    def generation(self, prompt_len: int, n_generated: int, unembedded: int = 1) -> float:
        """Prompt pass plus the cached passes that produced `n_generated` tokens."""
        total = self.prompt(prompt_len, unembedded)
        for j in range(1, n_generated):
            total += self.cached(prompt_len + j)
        return total


def n_decoded(generation: list[int], max_new_tokens: int) -> int:
    """Tokens a row produced: its continuation, plus the stop token when it stopped early."""
    return min(max_new_tokens, len(generation) + 1)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def clocks(values: list) -> str:
    return f"{spread([c.wall for c in values])} s wall, {spread([c.cpu for c in values])} CPU s"


def speedup(ratio: dict) -> str:
    return f"{spread(ratio['wall'])}x wall, {spread(ratio['cpu'])}x CPU time"


def efficiency(r: dict) -> str:
    return (
        f"{spread([f / 1e9 for f in r['flops_per_s']])} GFLOP/s = {spread(r['fraction_wall'])} of plain matmul "
        f"per wall second, {spread(r['fraction_cpu'])} per CPU second"
    )


def ceiling(r: dict) -> str:
    """The same work in plain transformers, and the loop's FLOP/s as a fraction of it."""
    own = [a / b for a, b in zip(r["flops_per_s"], r["plain"]["flops_per_s"])]
    return (
        f"plain transformers, same work: {clocks(r['plain']['clocks'])}, {efficiency(r['plain'])}; "
        f"this loop reaches {spread(own)} of its FLOP/s"
    )


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


@dataclass
class Clock:
    wall: float  # seconds
    cpu: float  # CPU seconds of this process (all threads): robust to other processes on the cores

    def __str__(self) -> str:
        return f"{self.wall:.2f} s ({self.cpu:.2f} CPU s)"


def timed(fn, *args, **kwargs) -> tuple[Clock, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return Clock(time.perf_counter() - wall, time.process_time() - cpu), out


# ----------------------------------------------------------------------------------------------
# Sections


def matmul_throughput(model, repeats: int, rows: int = 1024) -> Clock:
    """FLOP/s of a plain matmul [rows, d_model] x [d_model, d_mlp]: the best of `repeats` timings,
    per wall second and per CPU second (returned as a `Clock` of rates)."""
    cfg = model.cfg
    d_mlp = getattr(cfg, "d_mlp", None) or 4 * cfg.d_model
    a = torch.randn(rows, cfg.d_model, dtype=cfg.dtype)
    b = torch.randn(cfg.d_model, d_mlp, dtype=cfg.dtype)
    flops = 2.0 * rows * cfg.d_model * d_mlp
    calls = max(1, int(2e10 / flops))  # about 20 GFLOP per timing
    torch.matmul(a, b)
    clocks = [timed(lambda: [torch.matmul(a, b) for _ in range(calls)])[0] for _ in range(repeats)]
    return Clock(flops * calls / min(c.wall for c in clocks), flops * calls / min(c.cpu for c in clocks))


def sequential_steps(model, ids: torch.Tensor, order, steps: list[int], max_new_tokens: int):
    """The reference loop on some steps: one forward pass and one `generate` of one row per step."""
    stops = stop_token_ids(model)
    logits_rows, generations = [], []
    for step in steps:
        with torch.no_grad(), value_gate(model, HeadMask.from_heads(order[:step], model)):
            logits = model(ids)[0, -1]
            out = model.generate(
                ids, max_new_tokens=max_new_tokens, do_sample=False, verbose=False, return_type="tokens"
            )
        logits_rows.append(logits.float())
        generations += cut_at_stop(out[:, ids.shape[1] :].tolist(), stops)
    return torch.stack(logits_rows), generations


def former_batched_sweep(model, ids: torch.Tensor, order, n_rows: int, max_new_tokens: int):
    """The former batched path: `generate` on all rows, which unembeds every prompt position."""
    from headsup_lens.analysis import sweep_masks

    masks = sweep_masks(order, list(range(n_rows)), (model.cfg.n_layers, model.cfg.n_heads))
    with torch.no_grad(), value_gate(model, masks):
        out = model.generate(
            ids.expand(n_rows, -1).contiguous(),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            verbose=False,
            return_type="tokens",
            output_logits=True,
        )
    return cut_at_stop(out.sequences[:, ids.shape[1] :].tolist(), stop_token_ids(model))


def rates(work: float, clocks: list[Clock], peak: Clock) -> dict:
    """FLOP/s per wall second and the fraction of plain matmul's FLOP/s, per wall and per CPU second."""
    return {
        "flops_per_s": [work / c.wall for c in clocks],
        "fraction_wall": [work / c.wall / peak.wall for c in clocks],
        "fraction_cpu": [work / c.cpu / peak.cpu for c in clocks],
    }


def ratios(slow: list[Clock], fast: list[Clock]) -> dict:
    return {"wall": [s.wall / f.wall for s, f in zip(slow, fast)], "cpu": [s.cpu / f.cpu for s, f in zip(slow, fast)]}


def scaled(clock: Clock, factor: float) -> Clock:
    return Clock(clock.wall * factor, clock.cpu * factor)


def bench_sweep(model, plain, args, flops: Flops, peak: Clock) -> dict:
    order = random_order(model, seed=0)[: args.sweep_steps - 1]
    n_rows = len(order) + 1
    ids_list = prompt_ids(model, args.prompt)
    ids = torch.tensor([ids_list], device=model.cfg.device)
    picks = sorted({round(i * (n_rows - 1) / max(1, args.sequential_steps - 1)) for i in range(args.sequential_steps)})
    removal_sweep(model, args.prompt, order[:2], max_new_tokens=2)  # warm-up
    plain_decoding(plain, ids, 2, 2)
    batched, sequential, former, reference = [], [], [], []
    for repeat in range(args.repeats):
        clock, sweep = timed(
            removal_sweep, model, args.prompt, order, max_new_tokens=args.new_tokens, batch_size=args.batch_size
        )
        batched.append(clock)
        clock, (seq_logits, seq_generations) = timed(sequential_steps, model, ids, order, picks, args.new_tokens)
        sequential.append(scaled(clock, n_rows / len(picks)))
        if not args.skip_former:
            clock, former_ids = timed(former_batched_sweep, model, ids, order, n_rows, args.new_tokens)
            former.append(clock)
        reference.append(timed(plain_decoding, plain, ids, n_rows, args.new_tokens)[0])
        progress(
            f"sweep repeat {repeat}: batched {batched[-1]}, sequential (scaled) {sequential[-1]}"
            + (f", former batched {former[-1]}" if former else "")
            + f", plain transformers {reference[-1]}"
        )
    same = [sweep.generation_ids[s] for s in picks] == seq_generations
    tracked = torch.tensor(sweep.tokens.token_id.tolist())
    seq_ranks = (seq_logits[:, None, :] > seq_logits[:, tracked][:, :, None]).sum(-1) + 1
    ranks_equal = seq_ranks.tolist() == sweep.ranks[sweep.tokens.label].to_numpy()[picks].tolist()
    work = sum(flops.generation(len(ids_list), n_decoded(g, args.new_tokens)) for g in sweep.generation_ids)
    result = {
        "rows": n_rows,
        "prompt_tokens": len(ids_list),
        "new_tokens": args.new_tokens,
        "batch_size": sweep.metadata["batch_size"],
        "batched": batched,
        "sequential": sequential,
        "speedup": ratios(sequential, batched),
        **rates(work, batched, peak),
        "identical_to_sequential": bool(same and ranks_equal),
        "plain": {
            "clocks": reference,
            **rates(n_rows * flops.generation(len(ids_list), args.new_tokens), reference, peak),
        },
        "ranks": sweep.ranks[["top1_id", *sweep.top_labels]],
        "generation_ids": sweep.generation_ids,
    }
    if former:
        result.update(
            former=former,
            former_over_new=ratios(former, batched),
            identical_to_former=former_ids == sweep.generation_ids,
        )
    return result


def plain_transformers(model):
    """The wrapped model's Hugging Face class with the same config and dtype (random weights: timing
    only), no bridge and no hooks; Hugging Face's default attention implementation."""
    from transformers import AutoModelForCausalLM

    config = model.original_model.config
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=model.cfg.dtype).eval().requires_grad_(False)


def plain_decoding(plain, ids: torch.Tensor, rows: int, new_tokens: int) -> None:
    """Greedy decoding of `rows` copies of `ids` for exactly `new_tokens` tokens with the KV cache
    (last-position logits only), the work of a sweep whose rows never stop early."""
    with torch.no_grad():
        out = plain(ids.expand(rows, -1).contiguous(), use_cache=True, logits_to_keep=1)
        for _ in range(new_tokens - 1):
            out = plain(
                out.logits[:, -1].argmax(-1)[:, None],
                past_key_values=out.past_key_values,
                use_cache=True,
                logits_to_keep=1,
            )


def plain_training_pass(plain, rows: list[tuple[list[int], list[int]]], groups: list[list[int]]) -> None:
    """Forward over right-padded passes of `rows` (the training step's grouping), answer positions
    unembedded, cross-entropy, and the gradient of the input embeddings only (frozen weights)."""
    from headsup_lens.data import collate
    from headsup_lens.objective import answer_positions

    embed, head = plain.get_input_embeddings(), plain.get_output_embeddings()
    for group in groups:
        batch = collate([rows[i] for i in group], pad_id=0)
        inputs = embed(batch.input_ids).detach().requires_grad_(True)
        hidden = plain.base_model(inputs_embeds=inputs, attention_mask=batch.attention_mask).last_hidden_state
        r, positions, targets = answer_positions(batch.labels)
        nn.functional.cross_entropy(head(hidden[r, positions]).float(), targets, reduction="sum").backward()


def eval_prompts(model, k: int) -> list[list[int]]:
    rng = random.Random(0)
    words = [
        " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(rng.randint(1, 4)))
        for _ in range(k)
    ]
    return [prompt_ids(model, w) for w in words]


def bench_eval(model, args, flops: Flops, peak: Clock) -> dict:
    prompts = eval_prompts(model, args.eval_prompts)
    generate_answers(model, prompts[:2], max_new_tokens=2)  # warm-up
    batched, single = [], []
    for repeat in range(args.repeats):
        clock, batched_texts = timed(
            generate_answers, model, prompts, max_new_tokens=args.eval_new_tokens, batch_size=len(prompts)
        )
        batched.append(clock)
        clock, single_texts = timed(generate_answers, model, prompts, max_new_tokens=args.eval_new_tokens, batch_size=1)
        single.append(clock)
        progress(f"evaluation repeat {repeat}: batched {batched[-1]}, per example {single[-1]}")
    tokenizer = model.tokenizer
    lengths = [len(tokenizer.encode(t, add_special_tokens=False)) for t in batched_texts]
    work = sum(flops.generation(len(p), min(args.eval_new_tokens, n + 1)) for p, n in zip(prompts, lengths))
    return {
        "prompts": len(prompts),
        "batched": batched,
        "per_example": single,
        "speedup": ratios(single, batched),
        "identical": batched_texts == single_texts,
        **rates(work, batched, peak),
    }


def bench_train(model, plain, args, flops: Flops, peak: Clock) -> dict:
    from headsup_lens.data import Task, encode_pairs
    from headsup_lens.objective import length_batches
    from headsup_lens.training import TrainConfig, train_mask

    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))) for _ in range(400)]
    task = Task.from_pairs("reverse", [(w, w[::-1]) for w in words], n_eval=20)

    def run(steps: int):
        with warnings.catch_warnings():  # a few timed steps remove no head, as the library warns
            warnings.simplefilter("ignore")
            return train_mask(model, task, TrainConfig(steps=steps, checkpoint_every=0, progress=False))

    rows = encode_pairs(model, task.train_pairs[:16])
    groups = length_batches(model, rows)
    run(1)  # warm-up
    plain_training_pass(plain, rows, groups)
    short, long = args.train_steps // 2, args.train_steps
    per_step, reference = [], []
    for repeat in range(args.repeats):
        long_clock, result = timed(run, long)
        short_clock, _ = timed(run, short)
        per_step.append(
            Clock(
                (long_clock.wall - short_clock.wall) / (long - short),
                (long_clock.cpu - short_clock.cpu) / (long - short),
            )
        )
        reference.append(timed(plain_training_pass, plain, rows, groups)[0])
        progress(
            f"training repeat {repeat}: {long} steps {long_clock}, {short} steps {short_clock}, "
            f"plain transformers {reference[-1]}"
        )
        if per_step[-1].wall <= 0 or per_step[-1].cpu <= 0:  # the step time is the difference of two runs
            progress(
                f"  warning: {long - short} extra steps took no measurable time (timer noise); "
                f"the training rates below are meaningless: raise --train-steps"
            )
    # Work a step needs: the forward over each row's own tokens (padding is not counted) with the
    # answer positions unembedded, then the input gradients (the model is frozen): the linear layers
    # once more, attention twice more.
    lengths = [len(prompt) + len(answer) for prompt, answer in rows]
    answers = sum(len(answer) for _, answer in rows)
    linear = 2.0 * flops.linear * sum(lengths)
    attention = 4.0 * flops.attention * sum(n * n for n in lengths)
    work = 2 * linear + 3 * attention + 2 * 2.0 * flops.unembed * answers
    return {
        "batch": len(rows),
        "tokens": sum(lengths),
        "step": per_step,
        **rates(work, per_step, peak),
        "plain": {"clocks": reference, **rates(work, reference, peak)},
        "mask_logits_dtype": str(result.mask.logits.dtype),
    }


def compare_sweeps(first: dict, other: dict) -> dict:
    """Agreement of two dtypes' sweeps: equal top-1, rank differences of the tracked tokens, generations."""
    a, b = first["ranks"], other["ranks"]
    labels = [c for c in a.columns if c != "top1_id"]  # the first dtype's top-k tokens, tracked in both
    rank_a, rank_b = a[labels].to_numpy(), b[labels].to_numpy()
    return {
        "top1_equal": float((a.top1_id.to_numpy() == b.top1_id.to_numpy()).mean()),
        "tracked_ranks_equal": float((rank_a == rank_b).mean()) if labels else None,
        "max_rank_difference": int(abs(rank_a - rank_b).max()) if labels else None,
        "generations_equal": float(
            sum(x == y for x, y in zip(first["generation_ids"], other["generation_ids"])) / len(first["generation_ids"])
        ),
    }


# ----------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="qwen0.5b",
        help="random-weight model shape (default: the Qwen2.5-0.5B shape)",
    )
    parser.add_argument(
        "--model", default=None, help="load this model instead (hub name, directory, 'organism', 'smollm2')"
    )
    for name in ("layers", "heads", "kv-heads", "d-model", "d-mlp", "vocab"):
        parser.add_argument(f"--{name}", type=int, default=None, help=f"override the shape's {name}")
    parser.add_argument("--dtypes", default="fp32", help="comma-separated model dtypes, e.g. fp32,bf16 (default: fp32)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}"
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of every timing (default: 3)")
    parser.add_argument("--prompt", default=PROMPT, help="the sweep's user text (wrapped in the chat template)")
    parser.add_argument("--sweep-steps", type=int, default=40, help="sweep rows: steps 0..N-1 (default: 40)")
    parser.add_argument("--new-tokens", type=int, default=20, help="greedy tokens per sweep step (default: 20)")
    parser.add_argument(
        "--sequential-steps",
        type=int,
        default=4,
        help="steps the sequential loop is timed on, scaled to all steps (default: 4)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="sweep rows per chunk (default: memory budget)")
    parser.add_argument("--skip-former", action="store_true", help="do not time the former batched path")
    parser.add_argument(
        "--eval-prompts", type=int, default=32, help="K, prompts of the evaluation section (default: 32)"
    )
    parser.add_argument("--eval-new-tokens", type=int, default=10, help="greedy tokens per prompt (default: 10)")
    parser.add_argument(
        "--train-steps",
        type=int,
        default=4,
        help="N: a step is timed as (time of N steps - time of N/2) / (N/2) (default: 4)",
    )
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")

    with tempfile.TemporaryDirectory() as directory:
        if args.model is None:
            shape = dict(SHAPES[args.shape])
            for flag, key in (
                ("layers", "num_hidden_layers"),
                ("heads", "num_attention_heads"),
                ("kv_heads", "num_key_value_heads"),
                ("d_model", "hidden_size"),
                ("d_mlp", "intermediate_size"),
                ("vocab", "vocab_size"),
            ):
                if getattr(args, flag) is not None:
                    shape[key] = getattr(args, flag)
            source = build_random_dir(directory, shape)
            label = f"{args.shape} shape, random weights"
        else:
            source, label = args.model, args.model
        models = {dtype: load_model(source, device="cpu", dtype=dtype) for dtype in args.dtypes.split(",")}

    report: dict = {"model": label, "threads": args.threads, "results": {}}
    first = next(iter(models.values()))
    cfg = first.cfg
    flops = Flops.of(first)
    n_params = sum(p.numel() for p in first.original_model.parameters())
    print(
        f"model: {label}: {cfg.n_layers} layers x {cfg.n_heads} heads "
        f"({getattr(cfg, 'n_key_value_heads', None) or cfg.n_heads} KV), d_model {cfg.d_model}, vocab {cfg.d_vocab}, "
        f"{n_params / 1e6:.0f} M parameters; {args.threads} thread(s); repeats {args.repeats}, median [min-max]"
    )
    for dtype, model in models.items():
        peak = matmul_throughput(model, args.repeats)  # the reference of every FLOP/s fraction
        results = report["results"][dtype] = {"matmul": peak}
        plain = plain_transformers(model) if {"sweep", "train"} & set(sections) else None
        print(
            f"[{dtype}] plain matmul [1024 x {cfg.d_model}] x [{cfg.d_model} x {cfg.d_mlp}]: "
            f"{peak.wall / 1e9:.1f} GFLOP/s per wall second, {peak.cpu / 1e9:.1f} per CPU second"
        )
        if "sweep" in sections:
            r = results["sweep"] = bench_sweep(model, plain, args, flops, peak)
            print(
                f"[{dtype}] sweep: {r['rows']} steps x {r['new_tokens']} new tokens, prompt {r['prompt_tokens']} tokens, "
                f"chunks of {r['batch_size']} rows; batched {clocks(r['batched'])}; sequential {clocks(r['sequential'])} "
                f"(timed on {args.sequential_steps} steps, scaled)"
            )
            print(
                f"[{dtype}]   speed-up sequential/batched {speedup(r['speedup'])}; {efficiency(r)}; "
                f"identical ranks and generations: {r['identical_to_sequential']}"
            )
            print(f"[{dtype}]   {ceiling(r)}")
            if "former" in r:
                print(
                    f"[{dtype}]   former batched path (generate: every prompt position unembedded) / new: "
                    f"{speedup(r['former_over_new'])}; identical generations: {r['identical_to_former']}"
                )
        if "eval" in sections:
            r = results["eval"] = bench_eval(model, args, flops, peak)
            print(
                f"[{dtype}] evaluation K={r['prompts']}, {args.eval_new_tokens} new tokens: batched {clocks(r['batched'])}; "
                f"per example {clocks(r['per_example'])}"
            )
            print(
                f"[{dtype}]   speed-up per-example/batched {speedup(r['speedup'])}; batched {efficiency(r)}; "
                f"identical: {r['identical']}"
            )
        if "train" in sections:
            try:
                r = results["train"] = bench_train(model, plain, args, flops, peak)
            except RuntimeError as error:  # reported, so that the other sections and dtypes still run
                print(f"[{dtype}] training step FAILED: {type(error).__name__}: {error}")
                sections = [s for s in sections if s != "train"]
                continue
            print(
                f"[{dtype}] training step (batch {r['batch']}, {r['tokens']} tokens without padding): {clocks(r['step'])}; "
                f"{efficiency(r)}; mask logits {r['mask_logits_dtype']}"
            )
            print(f"[{dtype}]   {ceiling(r)}")
    dtypes = list(models)
    for dtype in dtypes[1:]:
        base, other = report["results"][dtypes[0]], report["results"][dtype]
        for section, key in (("sweep", "batched"), ("eval", "batched"), ("train", "step")):
            if section in sections:
                print(
                    f"[{dtypes[0]}/{dtype}] {section} time ratio: {speedup(ratios(base[section][key], other[section][key]))}"
                )
        if "sweep" in sections:
            other["sweep_agreement"] = compare_sweeps(base["sweep"], other["sweep"])
            print(f"[{dtype} vs {dtypes[0]}] sweep agreement: {other['sweep_agreement']}")
    if args.json:
        for results in report["results"].values():
            if "sweep" in results:
                results["sweep"].pop("ranks"), results["sweep"].pop("generation_ids")
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1, default=lambda x: x.__dict__ if isinstance(x, Clock) else str(x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
