"""Mask training's forward and backward at fixed shapes, replayed as one CUDA graph
(`TrainConfig.cuda_graph`: by default on a GPU where it serves, see `captures_step`).

On a GPU a training step over a batch of short rows (a few hundred tokens) is bound by launching its
ten thousand or so kernels, not by computing them. This step has the same shapes every time and
reads nothing back, so it is captured once (`gates._graph.Replay`) and replayed every later step:
- every row is right-padded to the longest training row of the run (one pass per step, not one per
  length group, never packed: `gates._packed`'s layout changes with the batch), and the answer
  positions to a fixed count: the extra entries point at the last column of row 0, which never
  predicts an answer token, and weigh 0;
- the step's inputs (tokens, answer positions, noise, temperature, per-task token counts) are copied
  into device buffers that the graph reads in place; the mask logits are updated in place by the
  optimiser, so the graph reads the current ones;
- the graph writes the gradients and the per-task losses into buffers; the optimiser, the gradient
  clipping and the logging stay outside it (a few kernels each).
Rows are independent and their padding follows their tokens, so the gradient is the length-grouped
step's up to rounding; tests compare both on the CPU, where the same step runs eagerly (no graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import copy_into
from .._typecheck import checked
from .._warnings import warn
from ..data import TaskBatch, collate
from ..gates import native_options
from ..gates._graph import Replay
from ..gates._native import native_forward
from ..gates._paths import module_hooks, uncaptured
from ..gates._value import valid_value_gate_hooks
from ..objective import answer_nll
from ._config import TrainConfig
from ._gumbel import straight_through

Row = tuple[list[int], list[int]]
STEP = "mask-training step"  # what a failed capture's warning names, and the step's profiler range
# Padding every row to the longest that computes more than this many times the rows' own tokens is
# worth a warning: the default step's length-grouped passes would compute far less.
PADDING_WARNED = 2.0


def padding_factor(encoded: Sequence[Sequence[Row]]) -> float:
    """The tokens a fixed-shape step computes (every row padded to the longest) over the rows' own."""
    lengths = [len(prompt) + len(answer) for rows in encoded for prompt, answer in rows]
    return max(lengths) * len(lengths) / sum(lengths)


def captures_step(
    model: TransformerBridge, config: TrainConfig, device: torch.device, encoded: Sequence[Sequence[Row]]
) -> bool:
    """Whether a run trains with the fixed-shape step (`TrainConfig.cuda_graph`): as asked, or by
    default where a capture serves: a GPU, the value gate, no activation checkpointing, no hook on the
    model (a hook's Python would run at the capture only: hook points, and plain PyTorch hooks on its
    modules, `gates._paths.module_hooks`) and padding that at most doubles the tokens."""
    if config.cuda_graph is not None:
        return config.cuda_graph
    return (
        device.type == "cuda"
        and config.gate == "value"
        and not config.activation_checkpointing
        and native_forward(model) is not None
        and not module_hooks(model).elsewhere()
        and padding_factor(encoded) <= PADDING_WARNED
    )


@checked
class FixedStep:
    """The gradient of a mask-training step's loss at fixed shapes (see the module's docstring).

    `rows_task`: the task of each of this process's batch rows (fixed: a step's rows are each task's
    `batch_size` rows in task order); `encoded`: every task's training rows (the widths to allow for);
    `parameters`: the head logits `[n_tasks, n_layers, n_heads]` and, when MLPs are gated, their
    logits `[n_tasks, n_layers]`; `graph`: capture the step as a CUDA graph (a model on a GPU)."""

    def __init__(
        self,
        model: TransformerBridge,
        rows_task: Tensor,
        encoded: Sequence[Sequence[Row]],
        parameters: Sequence[Tensor],
        pad_id: int,
        *,
        graph: bool,
    ) -> None:
        self.model, self.parameters, self.pad_id = model, list(parameters), pad_id
        device = parameters[0].device
        n_rows, n_tasks = len(rows_task), parameters[0].shape[0]
        lengths = [len(prompt) + len(answer) for rows in encoded for prompt, answer in rows]
        self.width = max(lengths)
        factor = padding_factor(encoded)
        if factor > PADDING_WARNED:
            warn(
                f"cuda_graph pads every row to the longest training row ({self.width} tokens; the mean row has "
                f"{sum(lengths) / len(lengths):.0f}): a step computes about {factor:.1f}x "
                "the tokens of its rows. Where lengths differ this much, leave cuda_graph at its default (None: "
                "here the step that groups rows by length) or drop the longest pairs"
            )
        self.n_answers = n_rows * max(len(answer) for rows in encoded for _, answer in rows)
        self.rows_task = rows_task
        shape = (n_rows, self.width)
        answers = [torch.zeros(self.n_answers, dtype=torch.long, device=device) for _ in range(3)]
        self.batch = TaskBatch(
            torch.full(shape, pad_id, dtype=torch.long, device=device),
            torch.zeros(shape, dtype=torch.long, device=device),
            torch.zeros(shape, dtype=torch.long, device=device),
            _answers=(answers[0], answers[1], answers[2]),
            _right_padded=True,
        )
        self.batch_tensors = (self.batch.input_ids, self.batch.attention_mask, self.batch.labels)
        self.answer_task = torch.zeros(self.n_answers, dtype=torch.long, device=device)
        self.real = torch.zeros(self.n_answers, device=device)  # 1 for a real answer token, 0 for a filler
        self.noise = [torch.zeros(n_rows, *p.shape[1:], device=device) for p in self.parameters]
        self.tau = torch.ones((), device=device)
        self.counts = torch.ones(n_tasks, device=device)
        self.grads = [torch.zeros_like(p) for p in self.parameters]
        self.per_task = torch.zeros(n_tasks, device=device)
        self._tasks_of = rows_task.to(device)
        hooked = module_hooks(model).elsewhere() if graph else []
        if hooked:
            warn(uncaptured(hooked, STEP, "running it eagerly"), RuntimeWarning)
        self._replay = Replay(self._compute, enabled=graph and not hooked, what=STEP)

    def __call__(self, rows: Sequence[Row], noise: Sequence[Tensor], tau: float, counts: Tensor) -> Tensor:
        """Set each parameter's `.grad` to the step's gradient on `rows` (this process's batch rows)
        with `noise` per parameter (`[rows, ...]`, on the host), temperature `tau` and each task's
        answer-token count `counts` (on the device; the loss is each task's mean); the per-task
        losses `[n_tasks]`, on the device."""
        host = collate(rows, pad_id=self.pad_id, width=self.width)
        for buffer, values in zip(self.batch_tensors, (host.input_ids, host.attention_mask, host.labels)):
            copy_into(buffer, values)
        found = host.answers()
        fill = self.n_answers - found[0].shape[0]
        # Fillers: row 0's last column predicts nothing (no answer token follows it), and weighs 0.
        for buffer, values, filler in zip(self.batch.answers(), found, (0, self.width - 1, 0)):
            copy_into(buffer, torch.cat([values, values.new_full((fill,), filler)]))
        copy_into(self.answer_task, torch.cat([self.rows_task[found[0]], self.rows_task.new_zeros(fill)]))
        copy_into(self.real, (torch.arange(self.n_answers) < found[0].shape[0]).float())
        for buffer, values in zip(self.noise, noise):
            copy_into(buffer, values)
        self.tau.fill_(tau)
        self.counts.copy_(counts)
        self._replay()
        for parameter, grad in zip(self.parameters, self.grads):
            parameter.grad = grad.clone()  # the optimiser and clipping work on a copy: the graph keeps its buffer
        return self.per_task.clone()

    def _compute(self) -> None:
        """The captured work: masks, the gated forward pass, the loss and its gradient, into the buffers."""
        masks = [straight_through(p[self._tasks_of], noise, self.tau) for p, noise in zip(self.parameters, self.noise)]
        hooks = valid_value_gate_hooks(self.model, masks[0], mlp=masks[1] if len(masks) > 1 else None)
        with native_options(pack_rows=False):  # the padded pass's shapes are the graph's
            nll, _ = answer_nll(self.model, self.batch, hooks)
        weights = self.real / self.counts[self.answer_task]  # each task's mean over its answer tokens
        weighted = nll * weights
        grads = torch.autograd.grad(weighted.sum(), self.parameters)
        for buffer, grad in zip(self.grads, grads):
            buffer.copy_(grad)
        self.per_task.copy_(torch.zeros_like(self.per_task).index_add(0, self.answer_task, weighted.detach()))
