"""The schedule curve: accuracy and answer loss of a training run's mask at chosen steps, read from
its checkpoints, so the effect of training longer is measured rather than guessed."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm
from transformer_lens.model_bridge import TransformerBridge

from .._typecheck import checked
from ..data import Task, encode_split
from ..masks import HeadMask
from ..models import fingerprint
from ..training import load_trajectory
from ._answers import answer_nll_per_example, greedy_answers, reduce_nll
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
    progress: bool = True,
) -> ScheduleCurve:
    """Accuracy (greedy, the task's matcher) and answer loss (the paper's "PPL", nats) of the mask a
    training run had at each of `steps`, from `run_dir/checkpoints/logits_step*.safetensors`.

    Steps without a checkpoint are skipped; `latest` adds
    the run's last checkpoint (a run still in progress). The mask at a step is the paper's final rule
    applied to the logits saved then, `sigmoid(M) >= 0.5`. The prompts are encoded once; each step's
    outputs get `evaluate`'s second reading (`score_outputs`): strict score, Wilson bounds, echo and
    empty counts, balanced accuracy on label tasks; the generations carry the per-example `strict`
    and `echo` flags. `metrics` adds columns: `name -> f(model, task, mask, generations)`. `progress`
    shows a bar over the steps.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
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
    for step in tqdm(wanted, desc=f"{task.name}: schedule", unit="step", disable=not progress, dynamic_ncols=True):
        mask = masks[step] = HeadMask.from_logits(logits[saved.index(step)], identity, task=task.name, step=step)
        options = dict(mask=mask, alpha=0.0, gate="value", batch_size=batch_size)
        generated = greedy_answers(model, encoded.prompts, **options, max_new_tokens=task.max_new_tokens)
        scores, per = score_outputs(task, generated, encoded.inputs, encoded.answers, labels)
        sums, counts = answer_nll_per_example(model, encoded, **options)
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
    return curve
