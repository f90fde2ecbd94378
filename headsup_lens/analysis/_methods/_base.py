"""What every head-finding method shares: the result type, the registry, the examples, batched losses.

A method scores every head so that **a higher score means "remove earlier"**: its removal order
is the heads by descending score (ties by position, layer then head). For ablation-based methods
the score is the estimated *benefit* of removing the head: the drop of the uninstructed answer
loss (nats). The data are the task's examples *without instruction*: the paper's question is which
heads to remove so that the bare input elicits the task.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..._formats import Fields, read_json
from ..._io import atomic_write_json
from ..._progress import progress
from ..._validate import check_choice, check_float, check_int, check_shape, check_tensor, describe, registrar
from ...data import Task, TaskBatch, tokenize_pairs
from ...gates import gate_hooks
from ...masks import Head, HeadMask
from ...objective import answer_nll

ABLATIONS = ("zero", "scaled", "mean")


def _grid(model_or_shape: Any) -> tuple[int, int]:
    """`(n_layers, n_heads)` of a model, a `ModelFingerprint` or a shape."""
    cfg = getattr(model_or_shape, "cfg", model_or_shape)
    if hasattr(cfg, "n_layers") and hasattr(cfg, "n_heads"):
        return int(cfg.n_layers), int(cfg.n_heads)
    if isinstance(model_or_shape, (tuple, list)) and len(model_or_shape) == 2:
        return check_int("n_layers", model_or_shape[0], minimum=1), check_int("n_heads", model_or_shape[1], minimum=1)
    raise TypeError(
        f"model_or_shape must be a model, a ModelFingerprint or an (n_layers, n_heads) pair, got {describe(model_or_shape)}"
    )


@dataclass
class HeadScores:
    """One method's ranking of every head for one task.

    `scores[layer, head]`: higher = removed earlier (see `order`); `settings`: what the method ran
    with (and what it measured on the way, e.g. the full model's loss); `seconds`: its wall-clock
    cost, data preparation included; `cpu_seconds`: the CPU time of this process over the same span
    (the cost on a shared machine, where wall-clock time depends on the load; not GPU work).
    """

    method: str
    scores: Float[Tensor, "n_layers n_heads"]
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    task: str | None = None
    cpu_seconds: float | None = None

    def __post_init__(self) -> None:
        if not self.method:
            raise ValueError("method must be a non-empty name")
        self.scores = check_tensor("scores", self.scores)
        check_shape("scores", self.scores, "n_layers n_heads")
        nan = torch.isnan(self.scores.detach())
        if nan.any():  # no order exists among NaN scores: a ranking would be arbitrary
            where = [tuple(h) for h in nan.nonzero()[:3].tolist()]
            raise ValueError(
                f"the scores of {self.method!r} hold NaN at {int(nan.sum())} of {nan.numel()} heads "
                f"(first at {', '.join(map(str, where))}); a ranking needs a number for every head "
                "(NaN scores usually mean NaN activations: check the model's weights)"
            )
        self.seconds = check_float("seconds", self.seconds, 0.0)
        if self.cpu_seconds is not None:
            self.cpu_seconds = check_float("cpu_seconds", self.cpu_seconds, 0.0)
        if self.task is not None and not self.task:
            raise ValueError("task must be a task name or None")

    @property
    def order(self) -> list[Head]:
        """Every head by descending score; ties keep position order (layer, then head)."""
        flat = self.scores.flatten().tolist()
        n_heads = self.scores.shape[1]
        return [divmod(i, n_heads) for i in sorted(range(len(flat)), key=lambda i: (-flat[i], i))]

    def removal_mask(self, k: int, model_or_shape: Any = None) -> HeadMask:
        """The mask that removes the first `k` heads of the order."""
        k = check_int("k", k, minimum=0, maximum=self.scores.numel())
        return HeadMask.from_heads(
            self.order[:k], tuple(self.scores.shape) if model_or_shape is None else model_or_shape
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Write the whole result as JSON (method, task, settings, seconds, scores); `load` reads it.
        For other tools, `masks.write_head_list(path, result.scores)` writes a plain head list."""
        data = {
            "method": self.method,
            "task": self.task,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "settings": self.settings,
            "scores": self.scores.tolist(),
        }
        return atomic_write_json(path, data)

    @classmethod
    def load(cls, path: str | os.PathLike, model_or_shape: Any = None) -> HeadScores:
        """A ranking written by `save`. The file must hold exactly its keys: `method` (a name),
        `scores` (a rectangular `[n_layers][n_heads]` list of numbers, no NaN), `settings` (an
        object), `seconds` (a number >= 0), `task` (a name or null) and optionally `cpu_seconds`;
        duplicate keys are refused. With `model_or_shape` (a model, `ModelFingerprint` or
        `(n_layers, n_heads)`), the scores must have that model's shape. A malformed file is a
        `FileFormatError` naming the file and the field."""
        what = "head scores file"
        fields = Fields(what, path, "")
        data = fields.keys(read_json(path, what), ["method", "scores", "settings", "seconds", "task"], ["cpu_seconds"])
        method = fields.text("method", data["method"])
        rows = data["scores"]
        if not isinstance(rows, list) or not rows or not all(isinstance(row, list) and row for row in rows):
            raise fields.error(
                "scores", f"expected a non-empty list of non-empty lists of numbers, got {describe(rows)}"
            )
        if len({len(row) for row in rows}) != 1:
            raise fields.error("scores", f"rows of different lengths {sorted({len(row) for row in rows})}")
        values = [[fields.number(f"scores[{l}][{h}]", v) for h, v in enumerate(row)] for l, row in enumerate(rows)]
        for l, row in enumerate(values):
            for h, v in enumerate(row):
                if math.isnan(v):
                    raise fields.error(f"scores[{l}][{h}]", "is NaN; a ranking needs a number for every head")
        if not isinstance(data["settings"], dict):
            raise fields.error("settings", f"expected an object, got {describe(data['settings'])}")
        seconds = fields.number("seconds", data["seconds"], finite=True, minimum=0.0)
        task = data["task"] if data["task"] is None else fields.text("task", data["task"])
        cpu = data.get("cpu_seconds")
        cpu = cpu if cpu is None else fields.number("cpu_seconds", cpu, finite=True, minimum=0.0)
        if model_or_shape is not None:
            shape = _grid(model_or_shape)
            if (len(values), len(values[0])) != shape:
                raise fields.error(
                    "scores",
                    f"has shape [{len(values)}, {len(values[0])}]; this model has [n_layers, n_heads] = {list(shape)}",
                )
        return cls(method, torch.tensor(values, dtype=torch.float32), data["settings"], seconds, task, cpu)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.scores.shape))
        return f"HeadScores({self.method!r}, {shape}, {self.seconds:.1f} s, first {self.order[:3]})"


@dataclass
class MethodContext:
    """What a method gets: the model, the task, its uninstructed examples and the ablation to use."""

    model: TransformerBridge
    task: Task
    batch: TaskBatch
    ablation: str
    alpha: float
    mean: Tensor | None
    seed: int
    max_rows: int

    def gate_options(self) -> dict[str, Any]:
        """`gate_hooks` keywords for the chosen ablation of the heads a mask removes."""
        return {"alpha": self.alpha if self.ablation == "scaled" else 0.0, "mean": self.mean}

    def ablation_settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ablation": self.ablation}
        if self.ablation == "scaled":
            out["alpha"] = self.alpha
        return out


MethodFn = Callable[..., tuple[Tensor, dict[str, Any]]]


@dataclass(frozen=True)
class HeadMethod:
    """A registered head-finding method (`register_method`): its `name`, its `run(context, **options)`
    returning `(scores [n_layers, n_heads], settings)`, and a one-line `description`.
    """

    name: str
    run: MethodFn
    description: str


METHODS: dict[str, HeadMethod] = {}


def register_method(name: str, description: str) -> Callable[[MethodFn], MethodFn]:
    """Register `run(context, **options) -> (scores, settings)` as a head-finding method; names are unique."""
    return registrar(METHODS, "head-finding method", name, lambda run: HeadMethod(name, run, description))


def example_batch(model: TransformerBridge, task: Task, split: str, n_examples: int | None) -> TaskBatch:
    """The first `n_examples` examples of a split, without instruction, as one right-padded batch."""
    indices = list(task.split_indices(split))
    if n_examples is not None:
        indices = indices[: check_int("n_examples", n_examples, minimum=1)]
    pairs = [task.pairs[i] for i in indices]
    shots = [task.demonstrations(i) for i in indices] if task.has_shots else None
    return tokenize_pairs(model, pairs, shots=shots)


def _trim(batch: TaskBatch) -> TaskBatch:
    width = int(batch.attention_mask.sum(1).max())
    return TaskBatch(batch.input_ids[:, :width], batch.attention_mask[:, :width], batch.labels[:, :width])


def answer_counts(batch: TaskBatch) -> Tensor:
    counts = (batch.labels[:, 1:] != -100).sum(1)
    if (counts == 0).any():
        raise ValueError("some examples have no answer tokens")
    return counts


def mean_z(
    model: TransformerBridge, batch: TaskBatch, *, max_rows: int = 64
) -> Float[Tensor, "n_layers n_heads d_head"]:
    """Each head's mean output `blocks.L.attn.hook_z` over every non-padding position of `batch`:
    the reference activation of mean ablation (`value_gate(..., mean=...)`)."""
    n_layers = model.cfg.n_layers
    total = torch.zeros(n_layers, model.cfg.n_heads, model.cfg.d_head, dtype=torch.float64)
    count = 0
    for chunk in chunks(batch, max_rows):
        keep = chunk.attention_mask.bool()

        def add(z: Tensor, hook) -> None:
            total[int(hook.name.split(".")[1])] += z[keep].double().sum(0).cpu()

        hooks = [(f"blocks.{l}.attn.hook_z", add) for l in range(n_layers)]
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            model(chunk.input_ids, attention_mask=chunk.attention_mask)
        count += int(keep.sum())
    return (total / count).float().to(model.cfg.device)


def example_losses(model: TransformerBridge, batch: TaskBatch, hooks: list | None = None) -> Float[Tensor, " batch"]:
    """Each example's mean answer-token NLL (differentiable; `hooks` added for this pass)."""
    nll, owner = answer_nll(model, batch, hooks)
    counts = answer_counts(batch).to(nll.device, nll.dtype)
    return torch.zeros(len(batch), device=nll.device, dtype=nll.dtype).index_add(0, owner, nll) / counts


def chunks(batch: TaskBatch, max_rows: int):
    """`batch` in pieces of at most `max_rows` examples, each trimmed to its longest row."""
    for start in range(0, len(batch), max_rows):
        yield _trim(
            TaskBatch(*(t[start : start + max_rows] for t in (batch.input_ids, batch.attention_mask, batch.labels)))
        )


def mask_losses(
    model: TransformerBridge,
    batch: TaskBatch,
    masks: Float[Tensor, "n_masks n_layers n_heads"],
    *,
    alpha: float = 0.0,
    mean: Tensor | None = None,
    max_rows: int = 256,
) -> Float[Tensor, " n_masks"]:
    """The answer loss (each example's mean answer-token NLL, averaged over examples) under each mask.

    Every (mask, example) pair is one row of a batched pass (per-row masks at the gate), up to
    `max_rows` rows per pass; equal to one `answer_loss` run per mask.
    """
    batch = _trim(batch)
    n = len(batch)
    counts = answer_counts(batch).to(torch.float64)
    per_pass = max(1, max_rows // n)
    out = []
    starts = range(0, masks.shape[0], per_pass)
    for start in progress(starts, desc=f"answer loss under {masks.shape[0]} masks", unit="pass", leave=False):
        group = masks[start : start + per_pass]
        rows = group.repeat_interleave(n, dim=0)
        repeated = TaskBatch(
            batch.input_ids.repeat(len(group), 1),
            batch.attention_mask.repeat(len(group), 1),
            batch.labels.repeat(len(group), 1),
        )
        with torch.no_grad():
            nll, owner = answer_nll(model, repeated, gate_hooks(model, rows, alpha=alpha, mean=mean))
        sums = torch.zeros(len(repeated), dtype=torch.float64).index_add_(0, owner.cpu(), nll.double().cpu())
        out.append((sums.view(len(group), n) / counts.cpu()).mean(1))
    return torch.cat(out).float()


def head_scores(
    model: TransformerBridge,
    task: Task,
    method: str = "single_ablation",
    *,
    split: str = "train",
    n_examples: int | None = 32,
    ablation: str = "zero",
    alpha: float = 0.25,
    seed: int = 0,
    max_rows: int = 256,
    **options: Any,
) -> HeadScores:
    """Score every head of `model` for eliciting `task` without instruction, with one method.

    Methods (`METHODS`; see each one's doc): `learned_mask` (the paper: from `mask=` or trained with
    `config=`), `single_ablation`, `gate_gradient` (Michel et al. 2019), `attribution_patching`,
    `activation_pattern`, `soft_gate_necessary` / `soft_gate_sufficient` (Causal Head Gating),
    `random`. The data are the first `n_examples` examples of `split` without instruction.
    `ablation` says what removing a head means for the methods that ablate: `"zero"`, `"scaled"`
    (the head keeps `alpha` of its output) or `"mean"` (its output is replaced by its mean `hook_z`
    over those examples, `mean_z`). `max_rows` caps the rows of one batched pass. `options` go to
    the method. Returns a `HeadScores` (higher score = removed earlier) with its cost in seconds.
    """
    check_choice("method", method, sorted(METHODS))
    accepted = [name for name in inspect.signature(METHODS[method].run).parameters if name != "context"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"method {method!r} takes no option {unknown[0]!r}; its options are {accepted or 'none'}")
    check_choice("ablation", ablation, ABLATIONS)
    alpha = check_float("alpha", alpha, 0.0, 1.0)
    max_rows = check_int("max_rows", max_rows, minimum=1)
    start, cpu_start = time.perf_counter(), time.process_time()
    batch = example_batch(model, task, split, n_examples)
    mean = mean_z(model, batch, max_rows=max_rows) if ablation == "mean" else None
    context = MethodContext(model, task, batch, ablation, alpha, mean, int(seed), max_rows)
    scores, settings = _check_method_result(method, METHODS[method].run(context, **options), model)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    settings = {"split": split, "n_examples": len(batch), **settings}
    return HeadScores(method, scores.detach().float().cpu(), settings, seconds, task.name, cpu_seconds)


def _check_method_result(method: str, result: Any, model: TransformerBridge) -> tuple[Tensor, dict]:
    """A method's `(scores, settings)`, its scores a tensor with one number per head of `model`: a
    grid of another shape would be ranked as if it covered the model (a custom method's mistake)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError(f"method {method!r} must return (scores, settings), got {describe(result)}")
    scores, settings = result
    if not isinstance(scores, Tensor):
        raise TypeError(f"method {method!r} must return its scores as a tensor, got {describe(scores)}")
    if not isinstance(settings, dict):
        raise TypeError(f"method {method!r} must return its settings as a dict, got {describe(settings)}")
    expected = [int(model.cfg.n_layers), int(model.cfg.n_heads)]
    if list(scores.shape) != expected:
        raise ValueError(
            f"method {method!r} returned scores of shape {list(scores.shape)}; this model has "
            f"[n_layers, n_heads] = {expected}: a method scores every head of the model"
        )
    return scores, settings
