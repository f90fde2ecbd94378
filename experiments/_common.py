"""What `smollm2.py` and `translation.py` still import from here until they move onto
`headsup_lens.reproduce` like every other script (after the evaluation API they use changes)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import headsup_lens as hl
from headsup_lens.reproduce import record_time as record_time


def fast_config(args: argparse.Namespace, **changes) -> hl.TrainConfig:
    """`TrainConfig.fast` with the script's `--seed` and, where given, `--steps` / `--batch-size`."""
    changes["seed"] = args.seed
    for name in ("steps", "batch_size"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    return hl.TrainConfig.fast(**changes)


FIGURES = Path(__file__).resolve().parents[1] / "figures"
OUTPUTS = Path(__file__).resolve().parents[1] / "outputs" / "experiments"  # git-ignored


def figure_root(out: str | os.PathLike) -> Path:
    """The folder whose one `plotly.min.js` every HTML figure under `out` loads: `figures/` (or the
    git-ignored `outputs/experiments/`) when `out` lies inside it, else `out` itself."""
    resolved = Path(out).resolve()
    for root in (FIGURES, OUTPUTS):
        if resolved.is_relative_to(root):
            return root
    return Path(out)
