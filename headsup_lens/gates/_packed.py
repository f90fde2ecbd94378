"""A loss pass over right-padded rows as one packed sequence: no padding, no final tokens.

A mask-training step's rows differ in length; one right-padded pass computes `rows x longest`
positions, and every row's last token too, though no loss reads its output (the last answer token
is a target, never an input that predicts one). Packing concatenates each row up to its last answer
position into one sequence, with position ids that restart at every row, so the projections and
MLPs (almost all of a pass's work) compute only the tokens a loss needs. Attention runs on the
rows' padded layout (`_attention.PACKED_ATTENTION`: causal within each row, banded by a sliding
window where the layer has one); the per-row gates become per-token gates. The result at every
answer position is the padded pass's, rounding aside: tests compare both with the `hook_z` gate on
every family.

The layout is built on the host, from the batch a GPU's batch was copied from
(`TaskBatch.on_host`), and copied over without waiting for the device: a packed pass on a GPU
synchronises nothing. Whether a GPU gains from fewer, smaller matrix products is for the GPU
benchmark to show; until it does, packing is on for a model on the CPU only
(`native_options(pack_rows=...)`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor

from .._device import to_device
from .._typecheck import checked
from ..data import TaskBatch
from ._paths import GateSpec
from ._scope import Scope


@checked
@dataclass(frozen=True)
class Packing:
    """Where a right-padded batch's tokens go in one packed sequence.

    `ids`, `positions`: the packed tokens and their position ids (counting from 0 in every row);
    `rows`: the batch row of every packed token (whose gates it takes); `slots`: its slot in the
    padded batch (`row x width + position`); `answers`: the packed index of every answer position,
    in `TaskBatch.answers` order."""

    ids: Int[Tensor, "1 tokens"]
    positions: Int[Tensor, "1 tokens"]
    rows: Int[Tensor, " tokens"]
    slots: Int[Tensor, " tokens"]
    answers: Int[Tensor, " n"]


@checked
def packing(batch: TaskBatch) -> Packing:
    """Each row of `batch` (right-padded) up to its last answer position, concatenated; built on the
    host (`TaskBatch.on_host`) and placed on the batch's device."""
    host = batch.on_host()
    ids = host.input_ids
    n_rows, width = ids.shape
    rows, positions = host.answers()[:2]
    need = torch.zeros(n_rows, dtype=torch.long)
    need.scatter_reduce_(0, rows, positions + 1, reduce="amax")  # tokens up to the last answer position
    keep = torch.arange(width)[None, :] < need[:, None]
    slots = torch.arange(n_rows * width).view(n_rows, width)[keep]
    offsets = need.cumsum(0) - need
    device = batch.input_ids.device
    return Packing(
        ids=to_device(ids[keep][None], device),
        positions=to_device((slots % width)[None], device),
        rows=to_device(slots // width, device),
        slots=to_device(slots, device),
        answers=to_device(offsets[rows] + positions, device),
    )


@checked
def token_gates(spec: GateSpec | None, rows: Int[Tensor, " tokens"]) -> GateSpec | None:
    """Per-row gates `[rows, ...]` as per-token gates `[tokens, ...]` of the packed sequence (gates
    shared by every row stay shared)."""
    if spec is None:
        return None

    def spread(values: Tensor | None) -> Tensor | None:
        return values if values is None or values.shape[0] == 1 else values[rows.to(values.device)]

    return GateSpec(heads=spread(spec.heads), mean=spec.mean, mlp=spread(spec.mlp))


# The fixed layout a loss pass takes instead of packing its batch (`packed_as`): layout, rows, width.
_GIVEN: Scope[tuple[Packing, int, int]] = Scope()


def packed_as(layout: Packing, rows: int, width: int) -> contextlib.AbstractContextManager[None]:
    """Inside the block, a loss pass on the native forward pass runs packed as `layout`, its attention
    on a padded layout of `rows x width` slots, instead of packing its own batch: a layout of fixed
    size (a token budget, filler tokens in rows of their own) whose tensors a captured CUDA graph
    reads in place (`training._graphed`). Its `answers` follow the batch's answer order."""
    return _GIVEN.holding((layout, rows, width))


def given_packing() -> tuple[Packing, int, int] | None:
    """The `packed_as` block entered last and not yet ended, as its arguments, or None."""
    return _GIVEN.current()
