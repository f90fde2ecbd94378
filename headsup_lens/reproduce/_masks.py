"""The mask cache of the reproduction scripts: learned masks kept per training recipe and model.

`<out>/masks/<recipe>-<weights>/<run>/` holds one training run (`train_masks`' folder: masks,
history, checkpoints) and `recipe.json`. `<recipe>` hashes the `TrainConfig` recipe, the prompt
format and the library version (each changes what a recipe learns); `<weights>` is the start of the
model fingerprint's content hash (`fingerprint(model).content_hash`), so a retrained model never
reuses its predecessor's masks. One script finds the masks another trained with the same recipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from transformer_lens.model_bridge import TransformerBridge

from .._io import atomic_write_json
from .._version import __version__
from ..data import Task
from ..evaluation import MaskTaskWarning
from ..gates import gate_kind
from ..masks import HeadMask
from ..models import fingerprint, prompt_format
from ..models._fingerprint import portable_name
from ..training import TrainConfig, safe_name, train_masks

RECIPE_FILE = "recipe.json"


@dataclass
class TrainedMask:
    """A learned mask and the training run folder it came from (its checkpoints: Fig. 3), or None
    for a stored mask."""

    mask: HeadMask
    run_dir: Path | None


def weights_id(model: TransformerBridge) -> str:
    """The short form of the model's one weights identity: the fingerprint's content hash."""
    content = fingerprint(model).content_hash or ""
    return content.removeprefix("sha256:")[:10]


def mask_cache(out: str | os.PathLike, model: TransformerBridge, config: TrainConfig) -> Path:
    """`<out>/masks/<recipe>-<weights>/`: the folder of every run of `config`'s recipe on this model."""
    key = {**config.recipe(), "prompt_format": prompt_format(model).name, "version": __version__}
    recipe = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return Path(out) / "masks" / f"{recipe}-{weights_id(model)}"


def cached_masks(
    model: TransformerBridge,
    tasks: Sequence[Task],
    config: TrainConfig,
    out: str | os.PathLike,
    *,
    model_name: str,
    log: bool = True,
) -> dict[str, TrainedMask]:
    """A learned mask per task: found in the cache when an earlier run trained it with `config`'s
    recipe on this model, else trained now (the missing tasks together, one forward pass per step:
    each mask gets the gradient it would get alone) into a new run folder of the cache. The training
    code writes its files atomically; `recipe.json` (model, tasks, recipe) is written last."""
    cache = mask_cache(out, model, config)
    found: dict[str, TrainedMask] = {}
    for task in tasks:
        for path in sorted(cache.glob(f"*/masks/{safe_name(task.name)}.safetensors")):
            found[task.name] = TrainedMask(HeadMask.load(path, model), path.parents[1])
            break
    missing = [t for t in tasks if t.name not in found]
    if missing:
        names = [t.name for t in missing]
        run_dir = cache / hashlib.sha256("\n".join(names).encode()).hexdigest()[:10]
        if log:
            kind = (
                f"{'negative-init ' if config.init_mean < 0 else ''}{config.gate}-gate{' + FFN' if config.mlp else ''}"
            )
            print(f"training {kind} masks for {', '.join(names)} ({config.steps} steps) -> {run_dir}", flush=True)
        results = train_masks(model, missing, config, out_dir=run_dir)
        atomic_write_json(
            run_dir / RECIPE_FILE, {"model": portable_name(model_name), "tasks": names, **config.recipe()}
        )
        found.update({name: TrainedMask(result.mask, run_dir) for name, result in results.items()})
    return {t.name: found[t.name] for t in tasks}


def stored_mask_path(
    folder: str | os.PathLike,
    task: Task | str,
    *,
    negative: bool = False,
    gate: str = "value",
    mlp: bool = False,
    seed: int = 0,
) -> Path:
    """`<folder>/<task>[_negative][_query][_mlp][_seed<k>].safetensors`: where a stored mask of this
    kind lives (`seed` 0, the paper's recipe, has no suffix)."""
    suffix = ("_negative" if negative else "") + gate_kind(gate).suffix + ("_mlp" if mlp else "")
    suffix += f"_seed{seed}" if seed else ""
    name = task if isinstance(task, str) else task.name
    return Path(folder) / f"{safe_name(name)}{suffix}.safetensors"


@contextlib.contextmanager
def mask_on_another_task() -> Iterator[None]:
    """Inside the block, `evaluate` does not warn that a mask meets a task other than its own: the
    stages that do so by design (a zero-shot mask on few-shot prompts and back, Table 8's IWSLT
    pairs under the translation mask); the table's column mask_task records it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskTaskWarning)
        yield
