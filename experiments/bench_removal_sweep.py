"""Benchmark: batched removal sweep vs the plain sequential loop, on the same model in one run.

The model has the organism's shape (8 layers x 16 heads, d_model 128, 4 KV heads, character
tokenizer) with random weights, built in a temporary directory. The sequential loop is what the
reference code does: for every step one forward pass and one greedy `generate` of one row. Prints
both wall times, their ratio (goal >= 20x), peak memory of the batched sweep, and checks that both
give identical ranks and generations.

    python experiments/bench_removal_sweep.py [--device cuda] [--threads 1] [--max-new-tokens 20] [--prompt TEXT]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time

import torch

from headsup_lens import HeadMask, load_model, removal_sweep, value_gate
from headsup_lens.analysis import random_order
from headsup_lens.models import encode, prompt_format, random_llama_dir

# An un-instructed input as the paper sweeps them (the organism's tasks take one English word).
PROMPT = "garden"


def sequential_sweep(model, prompt, order, max_new_tokens, top_k=5):
    """One forward pass and one greedy generation per step, one row at a time."""
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(prompt), add_bos=template.add_bos)], device=model.cfg.device)
    eos = model.tokenizer.eos_token_id
    ranks, generations, top = [], [], None
    for step in range(len(order) + 1):
        with torch.no_grad(), value_gate(model, HeadMask.from_heads(order[:step], model)):
            logits = model(ids)[0, -1]
            out = model.generate(
                ids, max_new_tokens=max_new_tokens, do_sample=False, verbose=False, return_type="tokens"
            )
        if top is None:
            top = logits.topk(top_k).indices.tolist()
        ranks.append([int((logits > logits[t]).sum()) + 1 for t in top])
        new = out[0, ids.shape[1] :].tolist()
        generations.append(new[: new.index(eos)] if eos in new else new)
    return ranks, generations


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (both runs)")
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--prompt", default=PROMPT, help="user text (wrapped in the chat template)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per chunk (default: memory budget)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(
            random_llama_dir(
                tmp,
                num_hidden_layers=8,
                num_attention_heads=16,
                num_key_value_heads=4,
                hidden_size=128,
                intermediate_size=384,
            ),
            device=args.device,
            dtype="float32",
        )
    order = random_order(model, seed=0)
    device = torch.device(args.device)
    print(
        f"model: 8 layers x 16 heads (random weights), {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, "
        f"device {device}, {args.threads} thread(s); prompt {args.prompt!r}; sweep of {len(order) + 1} steps, {args.max_new_tokens} new tokens"
    )

    removal_sweep(model, args.prompt, order[:4], max_new_tokens=2)  # warm-up (allocator, kernels)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = peak_rss_mib()
    start = time.perf_counter()
    batched = removal_sweep(model, args.prompt, order, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    batched_s = time.perf_counter() - start
    rss_after = peak_rss_mib()

    start = time.perf_counter()
    ranks, generations = sequential_sweep(model, args.prompt, order, args.max_new_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    sequential_s = time.perf_counter() - start

    same = batched.ranks[batched.top_labels].to_numpy().tolist() == ranks and batched.generation_ids == generations
    print(f"batched sweep   : {batched_s:8.2f} s  (chunks of {batched.metadata['batch_size']} rows)")
    print(f"sequential loop : {sequential_s:8.2f} s")
    print(f"speed-up        : {sequential_s / batched_s:8.1f}x  (goal >= 20x)")
    if device.type == "cuda":
        print(f"peak GPU memory : {torch.cuda.max_memory_allocated(device) / 2**20:8.1f} MiB (batched sweep)")
    print(
        f"peak RSS        : {rss_after:8.1f} MiB (process; {rss_after - rss_before:+.1f} MiB during the batched sweep)"
    )
    print(f"identical ranks and generations: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
