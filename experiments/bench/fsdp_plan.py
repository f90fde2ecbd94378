"""Per-GPU memory of mask training on the Llama-3.1 8B, 70B and 405B shapes in bf16: FSDP2 over 1, 2,
4 and 8 GPUs of one machine and 16 GPUs of 2 machines, beside `device_map="auto"` over the GPUs of one
machine (`headsup_lens.models.memory_plan`), and whether it fits GPUs of 80 GB and 141 GB.

The activations and workspace follow the law fitted to the measured steps of
`figures/bench/memory.csv` (`memory.py`'s fit: fp32 steps of Llama-kind decoders, times the measured
bf16/fp32 ratio), at the batch those steps measured: the paper's 16 rows, with the token counts of
SmolLM2's tokenizer on antonym (short inputs) and ag_news (news articles). Nothing is run on a model.

    python experiments/bench/fsdp_plan.py                          # prints the table
    python experiments/bench/fsdp_plan.py --out figures/bench      # also fsdp_plan.csv
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from memory import GIB, LLAMA_KIND, bf16_ratios, fit

from headsup_lens.models import LLAMA_3_SHAPES, MemoryLaw, memory_plan
from headsup_lens.options import parse

MEASURED = Path(__file__).resolve().parents[2] / "figures" / "bench" / "memory.csv"
LAYOUTS = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 16))  # (machines, GPUs in all)
GPU_GB = (80, 141)  # H100/A100 80 GB and H200 141 GB, decimal gigabytes as sold
TASKS = ("antonym", "ag_news")


@dataclass
class Options:
    """Options of the memory plan."""

    measured: str = str(MEASURED)
    """memory.csv of `memory.py` (the measured steps the law is fitted to)."""
    out: str | None = None
    """Folder for fsdp_plan.csv (e.g. figures/bench)."""


def laws(table: pd.DataFrame) -> dict[bool, MemoryLaw]:
    """The bf16 law per activation-checkpointing setting, fitted as `memory.py` fits it."""
    ratios = bf16_ratios(table)
    fp32 = table[(table.dtype == "float32") & table.family.isin(LLAMA_KIND)]
    out = {}
    for checkpointing, part in fp32.groupby("checkpointing"):
        (a, b), (c, e) = fit(part)
        activation, workspace = ratios[checkpointing]
        out[bool(checkpointing)] = MemoryLaw(a * activation, b * activation, c * workspace, e * workspace)
    return out


def plan(table: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for checkpointing, law in laws(table).items():
        for task in TASKS:
            measured = table[(table.model == "smollm2") & (table.task == task)]
            tokens, answers = float(measured.tokens.mean()), float(measured.answers.mean())
            for shape in LLAMA_3_SHAPES:
                for machines, gpus in LAYOUTS:
                    for row in memory_plan(shape, law, gpus=gpus, machines=machines, tokens=tokens, answers=answers):
                        row.update(task=task, checkpointing=checkpointing)
                        row.update({f"fits_{gb}gb": row["peak_gib"] * GIB <= gb * 1e9 for gb in GPU_GB})
                        rows.append(row)
    columns = ["model", "task", "checkpointing", "method", "machines", "gpus", "computing", "tokens", "answers"]
    frame = pd.DataFrame(rows)
    return frame[columns + [c for c in frame.columns if c not in columns]]


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="fsdp_plan.py", description=__doc__)
    frame = plan(pd.read_csv(options.measured))
    shown = frame[(frame.task == "antonym") & ~frame.checkpointing]
    print(shown[["model", "method", "gpus", "weights_gib", "gathered_gib", "activations_gib", "peak_gib"]].round(2))
    if options.out is not None:
        out = Path(options.out)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "fsdp_plan.csv", index=False)
        print(f"wrote {out / 'fsdp_plan.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
