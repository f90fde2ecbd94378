"""The schedule curve: accuracy and answer loss of a training run's mask at chosen steps, read from
its checkpoints, so the effect of training longer is measured rather than guessed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from transformer_lens.model_bridge import TransformerBridge

from .._io import OutputSet, atomic_write_json, locked_folder
from .._progress import progress as progress_bar
from .._validate import check_int, check_out_dir
from .._warnings import warn
from ..data import Task
from ..data._tokenize import encode_split
from ..masks import HeadMask
from ..masks._files import read_safetensors
from ..models import fingerprint, model_identity
from ..models._sharding import every_rank
from ..training._train import load_trajectory, safe_name
from ._answers import answers_and_nll, reduce_nll
from ._scoring import score_outputs, task_labels

# The steps the paper's schedule is read at: the fast schedule's end, then up to the paper's 6 250.
SCHEDULE_STEPS = (300, 1000, 3000, 6250)
Metric = Callable[[TransformerBridge, Task, HeadMask, list[str]], float]
TABLE, GENERATIONS, RECORD = "schedule_curve.csv", "schedule_generations.csv", "schedule_curve.json"


@dataclass
class ScheduleCurve:
    """`table`: one row per step read (step, heads kept, accuracy and strict score with intervals, echo
    and empty counts, answer loss, extra metrics). `generations`: one row per step and held-out
    example (input, answer, generation, correct, strict, echo). `masks`: the mask read at each step."""

    table: pd.DataFrame
    generations: pd.DataFrame
    masks: dict[int, HeadMask]

    def save_masks(self, run_dir: str | os.PathLike, task: str) -> list[Path]:
        """Write each step's mask to `<run_dir>/step_masks/step<N>/<task>.safetensors` (under the run
        folder's lock), where a folder of stored masks is expected (`--masks <run>/step_masks/step<N>`)."""
        with locked_folder(run_dir, "run_dir") as folder:
            return [
                mask.save(folder / "step_masks" / f"step{step}" / f"{safe_name(task)}.safetensors")
                for step, mask in self.masks.items()
            ]


def _describe(recorded: list) -> str:
    """A recorded model identity (`[architecture, n_layers, n_heads, d_head, d_vocab, weights hash]`) for messages."""
    architecture, n_layers, n_heads, _, _, weights = recorded
    short = str(weights).removeprefix("sha256:")[:12] if weights else "no hash"
    return f"{architecture}, {n_layers}x{n_heads} heads, weights {short}"


def _identity(where: Path, value: object) -> list:
    """`[architecture, n_layers, n_heads, d_head, d_vocab, weights hash]` from what a file records."""
    recorded = model_identity(value)
    if recorded is None:
        raise ValueError(f"{where} records its model as {value!r}, which is not a model identity")
    return list(recorded)


def _recorded_models(run_dir: Path) -> dict[Path, list]:
    """Where the run records the model it was trained on (`checkpoints/state.pt`, each checkpoint's
    metadata, the final masks' headers), and what it records there."""
    recorded: dict[Path, list] = {}
    state = run_dir / "checkpoints" / "state.pt"
    if state.is_file():
        try:
            saved = torch.load(state, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated or corrupted files raise several unpickling error types
            raise ValueError(f"the training state {state} cannot be read ({type(error).__name__})") from error
        identity = saved.get("identity") if isinstance(saved, dict) else None
        if isinstance(identity, dict) and "model" in identity:
            recorded[state] = _identity(state, identity["model"])
    files = sorted((run_dir / "checkpoints").glob("logits_step*.safetensors"))
    masks = [run_dir / "mask.safetensors", *sorted((run_dir / "masks").glob("*.safetensors"))]
    for path in [*files, *(m for m in masks if m.is_file())]:
        entry = read_safetensors(path, "training output")[1].get("model")
        if entry is None or entry == "null":
            continue
        try:
            value = json.loads(entry)
        except ValueError as error:
            raise ValueError(f"{path} has a malformed model entry {entry!r}") from error
        recorded[path] = _identity(path, value)
    return recorded


def check_run_model(run_dir: str | os.PathLike, model: TransformerBridge) -> None:
    """Refuse a training run folder whose recorded model (`checkpoints/state.pt`'s identity, the
    checkpoint files' metadata, the final masks' headers) is not `model`: another structure, or
    another weights hash where one is recorded. A run that records none warns."""
    run_dir = Path(run_dir)
    current = fingerprint(model)
    recorded = _recorded_models(run_dir)
    if not recorded:
        warn(f"the run {run_dir} records no model identity: it cannot be checked against {current.describe()}")
        return
    for where, identity in recorded.items():
        other_weights = identity[5] is not None and identity[5] != current.content_hash
        if tuple(identity[:5]) != current.structural() or other_weights:
            raise ValueError(
                f"the run {run_dir} was trained on another model: {where} records {_describe(identity)}, "
                f"but the model given is {current.describe()}; load the model the run was trained on"
            )


@every_rank
def schedule_curve(
    model: TransformerBridge,
    task: Task,
    run_dir: str | os.PathLike,
    steps: Sequence[int] = SCHEDULE_STEPS,
    *,
    latest: bool = True,
    split: str = "eval",
    batch_size: int = 16,
    metrics: Mapping[str, Metric] | None = None,
    progress: bool = True,
    out_dir: str | os.PathLike | None = None,
) -> ScheduleCurve:
    """Accuracy (greedy, the task's matcher) and answer loss (the paper's "PPL", nats) of the mask a
    training run had at each of `steps`, from `run_dir/checkpoints/logits_step*.safetensors`.

    The run must have been trained on `model` (its recorded identity, `check_run_model`): the masks
    are stamped with this model's fingerprint. Steps without a checkpoint are skipped; `latest` adds
    the run's last checkpoint (a run still in progress). The mask at a step is the paper's final rule
    applied to the logits saved then, `sigmoid(M) >= 0.5`. The prompts are encoded once; each step's
    outputs get `evaluate`'s second reading (`score_outputs`): strict score, Wilson bounds, echo and
    empty counts, balanced accuracy on label tasks; the generations carry the per-example `strict`
    and `echo` flags. `metrics` adds columns: `name -> f(model, task, mask, generations)`. `progress`
    shows a bar over the steps. With `out_dir`, `schedule_curve.csv`, `schedule_generations.csv` and
    `schedule_curve.json` (the run and the model) are written there as one set, under the folder's lock.
    """
    check_int("batch_size", batch_size, minimum=1)
    out = check_out_dir(out_dir, "out_dir") if out_dir is not None else None
    check_run_model(run_dir, model)
    saved, logits = load_trajectory(Path(run_dir), task=task.name)
    wanted = sorted({s for s in steps if s in saved} | ({saved[-1]} if latest else set()))
    if not wanted:
        raise ValueError(
            f"none of the steps {list(steps)} has a checkpoint in {run_dir} (saved: {saved[0]}..{saved[-1]})"
        )
    encoded = encode_split(model, task, split, False)
    identity = fingerprint(model)
    labels = task_labels(task)
    rows, texts, masks = [], [], {}
    for step in progress_bar(wanted, desc=f"{task.name}: schedule", unit="step", enabled=progress, delay=0.0):
        mask = masks[step] = HeadMask.from_logits(logits[saved.index(step)], identity, task=task.name, step=step)
        generated, sums, counts = answers_and_nll(
            model,
            encoded,
            mask=mask,
            alpha=0.0,
            gate="value",
            max_new_tokens=task.max_new_tokens,
            batch_size=batch_size,
        )
        scores, per = score_outputs(task, generated, encoded.inputs, encoded.answers, labels)
        row = {"step": step, "heads_kept": mask.n_kept, "n": len(encoded), **scores}
        row["answer_nll"] = reduce_nll(sums, counts, "example")
        for name, metric in (metrics or {}).items():
            row[name] = metric(model, task, mask, generated)
        rows.append(row)
        texts += [
            {"step": step, "input": x, "answer": y, "generation": g, "correct": c, "strict": s, "echo": e}
            for x, y, g, c, s, e in zip(
                encoded.inputs, encoded.answers, generated, per["correct"], per["strict"], per["echo"]
            )
        ]
    curve = ScheduleCurve(table=pd.DataFrame(rows), generations=pd.DataFrame(texts), masks=masks)
    if out is not None:
        with locked_folder(out, "out_dir"):
            stage = OutputSet(out, "schedule_curve")
            curve.table.to_csv(stage.path / TABLE, index=False)
            curve.generations.to_csv(stage.path / GENERATIONS, index=False)
            record = {"run_dir": str(Path(run_dir).resolve()), "task": task.name, "model": identity.to_dict()}
            atomic_write_json(stage.path / RECORD, record)
            stage.commit()
    return curve
