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
  into device buffers that the graph reads in place, through one pinned host buffer per dtype kept
  for the run (`_device.Staging`: one copy per dtype per step); the mask logits are updated in place by
  the optimiser, so the graph reads the current ones;
- the graph writes the gradients and the per-task losses into buffers; the optimiser, the gradient
  clipping and the logging stay outside it (a few kernels each).
On request (`native_options(pack_rows=True)`) the rows are packed into one sequence of a fixed token
budget instead (`packed_budget`, `gates._packed.packed_as`): fewer tokens through the projections and
MLPs, off by default until the GPU benchmark shows it wins there.
Rows are independent and their padding follows their tokens, so the gradient is the length-grouped
step's up to rounding; tests compare both on the CPU, where the same step runs eagerly (no graph).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import Staging
from .._typecheck import checked
from .._warnings import warn
from ..data import TaskBatch, collate
from ..gates import gate_kind, native_options
from ..gates._graph import Replay
from ..gates._native import native_forward
from ..gates._packed import Packing, packed_as, packing
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
        and gate_kind(config.gate).stand_in
        and not config.activation_checkpointing
        and native_forward(model) is not None
        and not module_hooks(model).elsewhere()
        and padding_factor(encoded) <= PADDING_WARNED
    )


def packed_budget(encoded: Sequence[Sequence[Row]], rows_task: Tensor) -> int:
    """The most tokens a step's rows can need packed (each row up to its last answer position: its
    length less one), over every batch the run can draw: each task's longest rows, as many as the step
    takes of that task (`rows_task`: the task of each of the step's rows)."""
    budget = 0
    for task, rows in enumerate(encoded):
        needs = sorted((len(prompt) + len(answer) - 1 for prompt, answer in rows), reverse=True)
        taken = int((rows_task == task).sum())
        budget += sum(needs[i % len(needs)] for i in range(taken))  # a batch larger than the data repeats rows
    return budget


@checked
class FixedStep:
    """The gradient of a mask-training step's loss at fixed shapes (see the module's docstring).

    `rows_task`: the task of each of this process's batch rows (fixed: a step's rows are each task's
    `batch_size` rows in task order); `encoded`: every task's training rows (the widths to allow for);
    `parameters`: the head logits `[n_tasks, n_layers, n_heads]` and, when MLPs are gated, their
    logits `[n_tasks, n_layers]`; `graph`: capture the step as a CUDA graph (a model on a GPU);
    `packed`: where the native pass serves, run the rows packed into one sequence of a fixed token budget (`packed_budget`; filler
    tokens in rows of their own, which no real token sees) instead of padding each to the longest:
    fewer tokens through the projections and MLPs, at the cost of moving each layer's queries, keys
    and values to the padded layout for attention and back."""

    def __init__(
        self,
        model: TransformerBridge,
        rows_task: Tensor,
        encoded: Sequence[Sequence[Row]],
        parameters: Sequence[Tensor],
        pad_id: int,
        *,
        graph: bool,
        packed: bool = False,
    ) -> None:
        native = native_forward(model)
        # Packing needs the native pass with its mask-free attention (`gates._packed`).
        packed = packed and native is not None and native.supports_sdpa and native.refusal is None
        self.model, self.parameters, self.pad_id, self.packed = model, list(parameters), pad_id, packed
        device = parameters[0].device
        n_rows, n_tasks = len(rows_task), parameters[0].shape[0]
        lengths = [len(prompt) + len(answer) for rows in encoded for prompt, answer in rows]
        self.width = max(lengths)
        factor = padding_factor(encoded)
        if factor > PADDING_WARNED and not packed:
            warn(
                f"cuda_graph pads every row to the longest training row ({self.width} tokens; the mean row has "
                f"{sum(lengths) / len(lengths):.0f}): a step computes about {factor:.1f}x "
                "the tokens of its rows. Where lengths differ this much, leave cuda_graph at its default (None: "
                "here the step that groups rows by length) or drop the longest pairs"
            )
        self.n_answers = n_rows * max(len(answer) for rows in encoded for _, answer in rows)
        self.rows_task = rows_task
        self.budget = packed_budget(encoded, rows_task) if packed else 0
        # Filler tokens of the packed sequence sit in rows of their own after the step's rows.
        self.layout_rows = n_rows + -(-self.budget // self.width)
        long, real = torch.long, torch.float32
        layout: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            "answers": ((3, self.n_answers), long),  # rows, positions, targets (`TaskBatch.answers`)
            "answer_task": ((self.n_answers,), long),
            "real": ((self.n_answers,), real),  # 1 for a real answer token, 0 for a filler
            "tau": ((), real),
            **{f"noise{i}": ((n_rows, *p.shape[1:]), real) for i, p in enumerate(self.parameters)},
        }
        if packed:
            budget = self.budget
            layout |= {"ids": ((1, budget), long), "positions": ((1, budget), long), "token_rows": ((budget,), long)}
            layout |= {"slots": ((budget,), long), "packed_answers": ((self.n_answers,), long)}
        else:
            layout["input_ids"] = ((n_rows, self.width), long)
        # One persistent staging buffer per run: a step's inputs go over in one copy per dtype.
        self.staging = Staging(layout, device)
        staged = self.staging.device
        shape = (n_rows, self.width)
        answers = staged["answers"]
        self.batch = TaskBatch(
            staged["input_ids"] if not packed else torch.full(shape, pad_id, dtype=long, device=device),
            torch.ones(shape, dtype=long, device=device),  # not read: the rows are right-padded
            torch.zeros(shape, dtype=long, device=device),  # not read: the answers are given
            _answers=(answers[0], answers[1], answers[2]),
            _right_padded=True,
        )
        self.packing = (
            Packing(
                ids=staged["ids"],
                positions=staged["positions"],
                rows=staged["token_rows"],
                slots=staged["slots"],
                answers=staged["packed_answers"],
            )
            if packed
            else None
        )
        self.answer_task, self.real, self.tau = staged["answer_task"], staged["real"], staged["tau"]
        self.noise = [staged[f"noise{i}"] for i in range(len(self.parameters))]
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
        staged = self.staging.host()
        host = collate(rows, pad_id=self.pad_id, width=self.width)
        found = host.answers()
        n = found[0].shape[0]
        # Fillers: row 0's last column predicts nothing (no answer token follows it), and weighs 0.
        answers = staged["answers"]
        for k, (values, filler) in enumerate(zip(found, (0, self.width - 1, 0))):
            answers[k, :n] = values
            answers[k, n:] = filler
        staged["answer_task"][:n] = self.rows_task[found[0]]
        staged["answer_task"][n:] = 0
        staged["real"][:n] = 1.0
        staged["real"][n:] = 0.0
        staged["tau"].fill_(tau)
        for i, values in enumerate(noise):
            staged[f"noise{i}"].copy_(values)
        if self.packed:
            self._stage_packing(host, staged, n)
        else:
            staged["input_ids"].copy_(host.input_ids)
        self.staging.send()
        self.counts.copy_(counts)
        self._replay()
        for parameter, grad in zip(self.parameters, self.grads):
            parameter.grad = grad.clone()  # the optimiser and clipping work on a copy: the graph keeps its buffer
        return self.per_task.clone()

    def _stage_packing(self, host: TaskBatch, staged: dict[str, Tensor], n: int) -> None:
        """The step's packed layout (`gates._packed.packing` of its rows), filled to the token budget:
        filler tokens (padding ids, positions counting within their row) in the rows after the step's,
        gated as row 0, and filler answers pointing at the first token (they weigh 0)."""
        layout = packing(host)
        used = layout.ids.shape[1]
        if used > self.budget:  # `packed_budget` bounds every batch the run draws
            raise RuntimeError(f"a step's rows need {used} packed tokens, over the budget of {self.budget}")
        filler = torch.arange(self.budget - used)
        first = host.input_ids.shape[0] * self.width  # the first slot after the step's rows
        for name, values, fill in (
            ("ids", layout.ids[0], torch.full_like(filler, self.pad_id)),
            ("positions", layout.positions[0], filler % self.width),
            ("token_rows", layout.rows, torch.zeros_like(filler)),
            ("slots", layout.slots, first + filler),
        ):
            target = staged[name].view(-1)
            target[:used] = values
            target[used:] = fill
        staged["packed_answers"][:n] = layout.answers
        staged["packed_answers"][n:] = 0

    def _compute(self) -> None:
        """The captured work: masks, the gated forward pass, the loss and its gradient, into the buffers."""
        masks = [straight_through(p[self._tasks_of], noise, self.tau) for p, noise in zip(self.parameters, self.noise)]
        hooks = valid_value_gate_hooks(self.model, masks[0], mlp=masks[1] if len(masks) > 1 else None)
        # The pass's shapes are the graph's: padded rows, or the packed layout of the token budget.
        layout = nullcontext() if self.packing is None else packed_as(self.packing, self.layout_rows, self.width)
        if self.packing is not None and native_forward(self.model) is None:
            raise RuntimeError(
                "the packed training step needs the native forward pass: remove the hooks added to the model"
            )
        with native_options(pack_rows=False), layout:
            nll, _ = answer_nll(self.model, self.batch, hooks)
        weights = self.real / self.counts[self.answer_task]  # each task's mean over its answer tokens
        weighted = nll * weights
        grads = torch.autograd.grad(weighted.sum(), self.parameters)
        for buffer, grad in zip(self.grads, grads):
            buffer.copy_(grad)
        self.per_task.copy_(torch.zeros_like(self.per_task).index_add(0, self.answer_task, weighted.detach()))
