"""Random masks that keep the model fluent: the random-mask control an elicitation cannot pass by
breaking the model.

A random mask with the learned mask's per-layer counts usually removes heads the model needs to
speak at all, so a learned mask beats it even where it elicits nothing. `fluent_random_masks` draws
random masks of the same per-layer shape from the heads whose removal hurts a neutral text least, and
keeps a draw only when its loss on that text is at most (1 + `tolerance`) times the learned mask's:

- the neutral text (`neutral_rows`): the first distinct English premises of XNLI dev, every token's
  loss (`"xnli-en"`), or the organism's other tasks with their instructions, the answers' loss
  (`"organism-instructed"`: the organism speaks nothing but its tasks);
- each head's effect (`head_effects`): the first-order change of that loss when the head is removed,
  the gradient with respect to a per-head scale of `blocks.L.attn.hook_z` at the full model (one
  forward and one backward pass);
- each layer's removed heads are drawn uniformly from its `pool` x (that many) heads of least effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._validate import check_float, check_int
from ..data import collate, encode_pairs, load_task
from ..data._organism import TASK_NAMES
from ..data._paths import data_dir as resolve_data_dir
from ..data._sources import read_tsv_column_rows
from ..gates._value import valid_value_gate_hooks
from ..masks import HeadMask
from ..models import encode, model_device, pad_token_id, prompt_format
from ..models._sharding import every_rank
from ..objective import answer_nll

Row = tuple[list[int], list[int]]
NEUTRAL_BATCH = 8  # rows per pass: the neutral text is a few dozen short sentences


def neutral_rows(
    model: TransformerBridge, kind: str, n: int, *, task: str | None = None, data_dir: str | None = None
) -> list[Row]:
    """The neutral text as (context ids, scored ids) rows: see the module's docstring. `task` (organism)
    is left out of its own neutral text."""
    check_int("n", n, minimum=1)
    if kind == "xnli-en":
        premises: list[str] = []
        for row in read_tsv_column_rows(resolve_data_dir(data_dir) / "xnli" / "dev-en.tsv"):
            if row[0] not in premises:
                premises.append(row[0])
            if len(premises) == n:
                break
        ids = [encode(model, text, add_bos=prompt_format(model).add_bos) for text in premises]
        return [(t[:1], t[1:]) for t in ids if len(t) > 1]
    if kind == "organism-instructed":
        others = [load_task(f"organism/{name}") for name in TASK_NAMES if f"organism/{name}" != task]
        each = max(1, math.ceil(n / len(others)))
        rows: list[Row] = []
        for other in others:
            pairs = [other.pairs[i] for i in other.split_indices("eval")[:each]]
            rows += encode_pairs(model, pairs, instruction=other.instruction)
        return rows[:n]
    raise ValueError(f"neutral text must be 'xnli-en' or 'organism-instructed', got {kind!r}")


def _scale_loss(model: TransformerBridge, rows: Sequence[Row], values: Tensor) -> Tensor:
    """Mean token loss of `rows` with every head's `hook_z` scaled by `values` [1, n_layers, n_heads]."""
    device, pad = model_device(model), pad_token_id(model)
    hooks = valid_value_gate_hooks(model, values)
    total, count = torch.zeros((), device=device), 0
    for start in range(0, len(rows), NEUTRAL_BATCH):
        batch = collate(rows[start : start + NEUTRAL_BATCH], pad_id=pad, device=device)
        nll, _ = answer_nll(model, batch, hooks)
        total = total + nll.sum()
        count += nll.numel()
    return total / count


@every_rank
def neutral_loss(model: TransformerBridge, rows: Sequence[Row], mask: HeadMask | None = None) -> float:
    """Mean token loss (nats) of the neutral text, under `mask` (value gate) or the full model."""
    values = mask.values if mask is not None else torch.ones(model.cfg.n_layers, model.cfg.n_heads)
    with torch.no_grad():
        return float(_scale_loss(model, rows, values.float()[None].to(model_device(model))))


@every_rank
def head_effects(model: TransformerBridge, rows: Sequence[Row]) -> Float[Tensor, "n_layers n_heads"]:
    """First-order change of the neutral loss when each head is removed (minus its gradient with respect to
    a per-head scale of `hook_z` at 1)."""
    scale = torch.ones(1, model.cfg.n_layers, model.cfg.n_heads, device=model_device(model), requires_grad=True)
    loss = _scale_loss(model, rows, scale)
    (grad,) = torch.autograd.grad(loss, scale)
    return -grad[0].detach().cpu()


@dataclass(frozen=True)
class FluentDraws:
    """The kept random masks, their neutral losses, the learned mask's, and how many were tried."""

    masks: list[HeadMask]
    losses: list[float]
    learned_loss: float
    full_loss: float
    tried: int
    tolerance: float


@every_rank
def fluent_random_masks(
    model: TransformerBridge,
    mask: HeadMask,
    rows: Sequence[Row],
    *,
    n_draws: int,
    pool: float = 2.0,
    tolerance: float = 0.10,
    max_candidates: int = 10,
    seed: int = 0,
) -> FluentDraws:
    """`n_draws` random masks of `mask`'s per-layer shape that keep the neutral text's loss within
    (1 + `tolerance`) of `mask`'s (see the module's docstring); at most `max_candidates` x `n_draws`
    tries, after which the masks kept so far are returned (fewer than asked: the caller says so)."""
    check_int("n_draws", n_draws, minimum=1)
    check_int("max_candidates", max_candidates, minimum=1)
    pool = check_float("pool", pool, 1.0)
    tolerance = check_float("tolerance", tolerance, 0.0)
    mask.check_model(model)
    removed = (mask.binary().values == 0).numpy()
    effects = head_effects(model, rows).numpy()
    learned, full = neutral_loss(model, rows, mask), neutral_loss(model, rows)
    rng = np.random.default_rng(seed)
    kept, losses, tried = [], [], 0
    while len(kept) < n_draws and tried < max_candidates * n_draws:
        tried += 1
        heads = []
        for layer, count in enumerate(removed.sum(1).tolist()):
            if count:
                size = min(removed.shape[1], max(count, math.ceil(pool * count)))
                candidates = np.argsort(effects[layer], kind="stable")[:size]
                heads += [(layer, int(h)) for h in sorted(rng.choice(candidates, size=count, replace=False))]
        draw = HeadMask.from_heads(heads, model)
        loss = neutral_loss(model, rows, draw)
        if loss <= learned * (1 + tolerance):
            kept.append(draw)
            losses.append(loss)
    return FluentDraws(kept, losses, learned, full, tried, tolerance)
