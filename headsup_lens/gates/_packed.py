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

Building the layout reads the answer positions, which on a GPU would wait for the device, and a
GPU gains little from fewer, smaller matrix products: packing is a CPU lever
(`native_options(pack_rows=...)`, on for a model on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor

from .._typecheck import checked
from ..data import TaskBatch
from ._paths import GateSpec


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
    """Each row of `batch` (right-padded) up to its last answer position, concatenated."""
    ids = batch.input_ids
    n_rows, width = ids.shape
    rows, positions = batch.answers()[:2]
    need = torch.zeros(n_rows, dtype=torch.long, device=ids.device)
    need.scatter_reduce_(0, rows, positions + 1, reduce="amax")  # tokens up to the last answer position
    keep = torch.arange(width, device=ids.device)[None, :] < need[:, None]
    slots = torch.arange(n_rows * width, device=ids.device).view(n_rows, width)[keep]
    offsets = need.cumsum(0) - need
    return Packing(
        ids=ids[keep][None],
        positions=(slots % width)[None],
        rows=slots // width,
        slots=slots,
        answers=offsets[rows] + positions,
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
