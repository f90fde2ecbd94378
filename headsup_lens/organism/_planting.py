"""The planted pathways S_t: per task, a fixed set of heads whose removal switches echo to task t."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from .._io import atomic_write_json
from ..masks import HeadMask
from ..models import builtin_model_dir

Head = tuple[int, int]
PLANTED_FILE = "planted.json"


def plant_head_sets(
    tasks: tuple[str, ...] | list[str], n_layers: int, n_heads: int, size: int, seed: int = 0
) -> dict[str, list[Head]]:
    """Disjoint head sets, one per task, each spread over the layers.

    Every set takes one head from each layer in turn (layers visited in a random order per round),
    so a set of `size >= n_layers` touches every layer. Raises ValueError when the sets cannot be
    disjoint (`len(tasks) * size > n_layers * n_heads`).
    """
    if size < 1:
        raise ValueError(f"planted set size must be positive, got {size}")
    if len(tasks) * size > n_layers * n_heads:
        raise ValueError(
            f"{len(tasks)} disjoint sets of {size} heads need {len(tasks) * size} heads; "
            f"the model has {n_layers * n_heads}"
        )
    rng = random.Random(seed)
    free = {layer: rng.sample(range(n_heads), n_heads) for layer in range(n_layers)}
    sets: dict[str, list[Head]] = {task: [] for task in tasks}
    # Round-robin over tasks so every task gets heads from the same number of layers.
    while any(len(s) < size for s in sets.values()):
        for task in tasks:
            if len(sets[task]) == size:
                continue
            used = {layer for layer, _ in sets[task]}
            layers = [l for l in range(n_layers) if free[l]]
            fresh = [l for l in layers if l not in used] or layers
            # Prefer layers this set has few heads in, then layers with the most free heads.
            counts = {l: sum(1 for layer, _ in sets[task] if layer == l) for l in fresh}
            least = min(counts.values())
            candidates = [l for l in fresh if counts[l] == least]
            most_free = max(len(free[l]) for l in candidates)
            layer = rng.choice([l for l in candidates if len(free[l]) == most_free])
            sets[task].append((layer, free[layer].pop()))
    return {task: sorted(heads) for task, heads in sets.items()}


def planted_mask(planted: dict[str, list[Head]], task: str, model) -> HeadMask:
    """The ground-truth pathway of `task` as a `HeadMask` (S_t removed, every other head kept)."""
    key = task.removeprefix("organism/")
    if key not in planted:
        raise ValueError(f"no planted set for task {task!r}; planted tasks are {sorted(planted)}")
    return HeadMask.from_heads([(int(l), int(h)) for l, h in planted[key]], model)


def save_planted(
    directory: str | os.PathLike, planted: dict[str, list[Head]], n_layers: int, n_heads: int, **info
) -> Path:
    """Write `planted.json`: S_t per task as `[layer, head]` lists, plus the model shape and `info`."""
    data = {
        "n_layers": n_layers,
        "n_heads": n_heads,
        "sets": {task: [list(h) for h in heads] for task, heads in planted.items()},
        **info,
    }
    return atomic_write_json(Path(directory) / PLANTED_FILE, data)


def load_planted(directory: str | os.PathLike | None = None) -> dict[str, list[Head]]:
    """S_t per task from `planted.json` in `directory` (default: the shipped organism)."""
    folder = builtin_model_dir("organism") if directory is None else directory
    if folder is None:
        raise ValueError("the built-in organism's folder is missing from this installation")
    path = Path(folder) / PLANTED_FILE
    if not path.is_file():
        raise ValueError(f"no {PLANTED_FILE} in {directory}: not a trained organism directory")
    data = json.loads(path.read_text(encoding="utf-8"))
    return {task: [tuple(h) for h in heads] for task, heads in data["sets"].items()}
