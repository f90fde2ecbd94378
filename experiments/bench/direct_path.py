"""Benchmark: greedy decoding through the direct forward pass (`gates._fast._direct`, Llama-family decoders,
rows with the same tokens and gates computed once) against the native pass (the model's own modules)
and the bridge's hook points, in one run, on the CPU.

    python experiments/bench/direct_path.py --models organism smollm2 --calls 5 \
        --out figures/bench/direct_path.csv

Work: a removal sweep of a prompt (`--heads` heads removed one by one, `--tokens` greedy tokens per
row: the rows share their prompt and their gates below the first head they remove) and a batch of
distinct prompts under one mask (nothing to share). Each path runs once untimed (allocation, the
stand-in's build), then `--calls` times in turn with the others (interleaved, so that the machine's
load falls on every path alike); one torch thread. Reported per model, work and path: the median
wall and CPU seconds of a call, and the ratio of the medians against the bridge (> 1: faster than
the bridge). Checked: every path gives the same generations.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import pandas as pd
import torch

from headsup_lens import load_model
from headsup_lens.analysis import removal_sweep, weight_order
from headsup_lens.gates import direct_path, native_options
from headsup_lens.masks import HeadMask
from headsup_lens.models import left_pad
from headsup_lens.objective import greedy_generate

PATHS = {
    "direct": lambda: native_options(prefix_sharing=True),
    "native": lambda: native_options(prefix_sharing=False),
    "bridge": lambda: direct_path(False),
}
WORDS = ["garden", "rabbit", "window", "orange", "silver", "market", "bridge", "candle"]


def works(model, heads: int, tokens: int) -> dict:
    torch.manual_seed(0)
    mask = HeadMask.from_logits(torch.randn(model.cfg.n_layers, model.cfg.n_heads) + 1.0)
    order = weight_order(mask)[:heads]
    tokenizer = model.tokenizer
    ids, attention = left_pad([tokenizer(w)["input_ids"] for w in WORDS], pad_id=tokenizer.pad_token_id or 0)
    stops = {tokenizer.eos_token_id}

    def sweep() -> list[str]:
        return removal_sweep(model, "garden", order, max_new_tokens=tokens, progress=False).generations

    def batch() -> list[list[int]]:
        out = greedy_generate(model, ids, attention, max_new_tokens=tokens, stops=stops, mask=mask.values)
        return out.tokens

    return {f"sweep ({heads + 1} rows)": sweep, f"distinct prompts ({len(WORDS)} rows)": batch}


def timed(call) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["organism", "smollm2"])
    p.add_argument("--calls", type=int, default=5, help="timed calls per path (default 5)")
    p.add_argument("--heads", type=int, default=24, help="heads the sweep removes (default 24)")
    p.add_argument("--tokens", type=int, default=8, help="greedy tokens per row (default 8)")
    p.add_argument("--out", type=Path, default=None, help="CSV to write (default: print only)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for name in args.models:
        model = load_model(name, device="cpu", dtype="float32")
        for work, call in works(model, args.heads, args.tokens).items():
            clocks: dict[str, list[tuple[float, float]]] = {path: [] for path in PATHS}
            outputs = {}
            for repeat in range(args.calls + 1):
                for path, scope in PATHS.items():
                    with torch.no_grad(), contextlib.ExitStack() as stack:
                        stack.enter_context(scope())
                        wall, cpu, outputs[path] = timed(call)
                    if repeat:  # the first call of each path is not timed
                        clocks[path].append((wall, cpu))
            if len({str(o) for o in outputs.values()}) != 1:
                raise SystemExit(f"{name}, {work}: the paths' generations differ")
            medians = {path: tuple(statistics.median(c[i] for c in clocks[path]) for i in (0, 1)) for path in PATHS}
            for path, (wall, cpu) in medians.items():
                bridge_wall, bridge_cpu = medians["bridge"]
                rows.append(
                    dict(model=name, work=work, path=path, calls=args.calls, median_wall_s=round(wall, 4),
                         median_cpu_s=round(cpu, 4), vs_bridge_wall=round(bridge_wall / wall, 2),
                         vs_bridge_cpu=round(bridge_cpu / cpu, 2))
                )  # fmt: skip
                print(rows[-1], flush=True)
        del model
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
