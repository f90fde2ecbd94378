"""`headsup similarity`: per-layer cosine similarity of settings to the instructed run (Fig. 4).

Heavy modules are imported inside the command, so `--help` answers at once."""

from __future__ import annotations

from dataclasses import dataclass

from .._io import OutputSet
from ..analysis._config import SimilarityConfig
from ..options import DataOptions, FigureOptions, Given, ModelOptions, option
from ._outputs import check_gated_mask, load, load_mask, report, save_figures, write_csv
from ._registry import check_out_dir, command


@dataclass(frozen=True)
class SimilarityCommand(FigureOptions, DataOptions, ModelOptions):
    """Options of `headsup similarity`."""

    prompt: str
    """User text without instruction."""
    out: str
    """Output folder: similarity.csv (one row per comparison and layer) and a figure."""
    mask: str | None = None
    """Mask file or folder for the masked settings (without it only original vs instructed is compared)."""
    task: str | None = None
    """Task whose instruction template to use, e.g. `antonym`."""
    similarity: SimilarityConfig = option(default_factory=SimilarityConfig, group="Similarity")
    """The settings compared (`setting_similarity`'s config)."""


def instruction_of(args: SimilarityCommand) -> str:
    """The instructed settings' template: --instruction, else the --task's (with `{input}`)."""
    instruction = args.similarity.instruction
    if instruction is None and args.task is not None:
        from ..data import load_task  # deferred: the task registry is not needed for --help

        instruction = load_task(args.task, args.data_dir).instruction
    if instruction is None or "{input}" not in instruction:
        raise ValueError("give --instruction (a template with {input}) or a --task that has one")
    return instruction


def check_similarity(args: SimilarityCommand, given: Given) -> None:
    instruction_of(args)
    check_gated_mask(args, given, "similarity", "only original vs instructed would run")


@command("similarity", SimilarityCommand, check=check_similarity)
def run_similarity(args: SimilarityCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    import pandas as pd

    from ..analysis import setting_similarity
    from ..plots import similarity_figure

    config = args.similarity.replace(instruction=instruction_of(args))
    out = check_out_dir(args.out)
    stage = OutputSet(out, "similarity", option="--out", files=["similarity.csv"])
    model = load(args)
    tables = setting_similarity(model, args.prompt, load_mask(args.mask, model), config)
    write_csv(stage.path / "similarity.csv", pd.concat([t.assign(comparison=name) for name, t in tables.items()]))
    files = ["similarity.csv"]
    save_figures(stage.path, {"similarity": similarity_figure(tables)}, args.png, files)
    stage.commit()
    for name, table in tables.items():
        print(f"{name}: block output at the last layer {table.block_out.iloc[-1]:.3f}")
    report(out, files)
    return 0
