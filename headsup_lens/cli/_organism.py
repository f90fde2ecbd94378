"""`headsup organism train|check`: train the built-in organism, or check its planted pathways.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from tqdm.auto import tqdm

from ..options import DeviceOptions, Given, check_counts, option
from ..organism import OrganismConfig
from ._outputs import compact_table
from ._registry import check_out_dir, command


@dataclass(frozen=True)
class OrganismTrainConfig(OrganismConfig):
    """Options of `headsup organism train` (the defaults are the shipped organism's recipe)."""

    HOW: ClassVar[tuple[str, ...]] = ("probe_every", "checkpoint_every", "micro_batches")  # not in the recipe

    out: str = option("organism", aliases=["--output"])
    """Folder to write the trained organism to (a Hugging Face model directory)."""
    quiet: bool = False  # no progress bar


@dataclass(frozen=True)
class OrganismCheckConfig(DeviceOptions):
    """Options of `headsup organism check`."""

    model: str = "organism"  # trained organism: "organism" (shipped) or a folder written by `organism train`
    n_words: int | None = None  # held-out words per task (default: all 100)
    seed: int = 0  # seed of the random head sets

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, n_words=1, seed=0)


@dataclass(frozen=True)
class OrganismCommand:
    """`headsup organism train` or `headsup organism check`."""

    action: OrganismTrainConfig | OrganismCheckConfig = option(
        subcommands={"train": OrganismTrainConfig, "check": OrganismCheckConfig}
    )


@command("organism", OrganismCommand)
def run_organism(config: OrganismCommand, given: Given) -> int:
    action = config.action
    if isinstance(action, OrganismTrainConfig):
        return _train(action)
    return _check(action)


def _train(config: OrganismTrainConfig) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..organism import check_planted, train_organism

    recipe = OrganismConfig(**{f.name: getattr(config, f.name) for f in fields(OrganismConfig)})
    check_out_dir(config.out)
    log = None if config.quiet else tqdm.write
    result = train_organism(recipe, config.out, progress=not config.quiet, log=log)
    print(f"trained in {result.wall_time_s / 60:.1f} min; wrote {config.out}")
    table = check_planted(result.model, result.planted, n_words=None)
    print(compact_table(table))
    return 0


def _check(config: OrganismCheckConfig) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..models import builtin_model_dir, load_model
    from ..organism import bar_failures, check_planted

    model = load_model(config.model, device=config.device, dtype=config.dtype)
    directory = builtin_model_dir(config.model) or Path(config.model)
    table = check_planted(model, directory, n_words=config.n_words, seed=config.seed)
    print(compact_table(table))
    failures = bar_failures(table)
    for line in failures:
        print(f"below the bar: {line}")
    return 1 if failures else 0
