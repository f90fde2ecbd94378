"""The schedule curve: accuracy and answer loss of a training run's mask at chosen steps, read from
its checkpoints, so the effect of training longer is measured rather than guessed."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from transformer_lens.model_bridge import TransformerBridge

from .._io import locked_folder
from .._typecheck import checked
from ..data import Task, task_prompts
from ..masks import HeadMask
from ..models import fingerprint
from ..training import load_trajectory, safe_name
from ._evaluate import answer_loss, generations
from ._scoring import score_outputs, task_labels

# The steps the paper's schedule is read at: the fast schedule's end, then up to the paper's 6 250.
SCHEDULE_STEPS = (300, 1000, 3000, 6250)
Metric = Callable[[TransformerBridge, Task, HeadMask, list[str]], float]


@checked
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


@checked
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
) -> ScheduleCurve:
    """Accuracy (greedy, the task's matcher) and answer loss (the paper's "PPL", nats) of the mask a
    training run had at each of `steps`, from `run_dir/checkpoints/logits_step*.safetensors`.

    Steps without a checkpoint are skipped; `latest` adds the run's last checkpoint (a run still in
    progress). The mask at a step is the paper's final rule applied to the logits saved then,
    `sigmoid(M) >= 0.5`. Each step's outputs get `evaluate`'s second reading (`score_outputs`):
    strict score, Wilson bounds, echo and empty counts, balanced accuracy on label tasks; the
    generations carry the per-example `strict` and `echo` flags. `metrics` adds columns:
    `name -> f(model, task, mask, generations)`.
    """

    saved, logits = load_trajectory(Path(run_dir), task=task.name)
    wanted = sorted({s for s in steps if s in saved} | ({saved[-1]} if latest else set()))
    if not wanted:
        raise ValueError(
            f"none of the steps {list(steps)} has a checkpoint in {run_dir} (saved: {saved[0]}..{saved[-1]})"
        )
    answers = task_prompts(task, split, False)[2]
    pairs = [task.pairs[i] for i in task.split_indices(split)]
    identity = fingerprint(model)
    labels = task_labels(task)
    rows, texts, masks = [], [], {}
    for step in wanted:
        mask = masks[step] = HeadMask.from_logits(logits[saved.index(step)], identity, task=task.name, step=step)
        generated = generations(
            model, task, mask=mask, split=split, max_new_tokens=task.max_new_tokens, batch_size=batch_size
        )
        scores, per = score_outputs(task, generated, [x for x, _ in pairs], answers, labels)
        row = {
            "step": step,
            "heads_kept": mask.n_kept,
            "n": len(answers),
            **scores,
            "answer_nll": answer_loss(model, task, mask=mask, split=split, batch_size=batch_size),
        }
        for name, metric in (metrics or {}).items():
            row[name] = metric(model, task, mask, generated)
        rows.append(row)
        texts += [
            {"step": step, "input": x, "answer": y, "generation": g, "correct": c, "strict": s, "echo": e}
            for (x, y), g, c, s, e in zip(pairs, generated, per["correct"], per["strict"], per["echo"])
        ]
    return ScheduleCurve(table=pd.DataFrame(rows), generations=pd.DataFrame(texts), masks=masks)
