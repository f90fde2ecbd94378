"""The model work behind the explorer: a removal sweep per order to scrub, a gated greedy pass for any
other set of removed heads, the logit lens and the last position's attention of that set.

Everything the widget shows comes from here, computed once per (set of removed heads, alpha, gate)
and kept in a least-recently-used cache, so revisiting a set costs nothing. A set that is the first
k heads of an order whose sweep exists is read from that sweep (the sweep ran all its steps as rows
of a few batched forward passes); any other set runs one gated greedy pass with the KV cache
(`objective.greedy_generate`, the sweep's own decoding loop, on one row).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._names import Gate
from ..analysis import (
    RemovalSweep,
    influence_order,
    last_position_attention,
    random_order,
    removal_sweep,
)
from ..analysis._common import check_heads, prompt_ids, prompt_text, target_ids, token_ranks, token_text
from ..analysis._lens import decode_stream
from ..gates._registry import check_gate
from ..masks import Head, HeadMask
from ..models import stop_token_ids
from ..objective import greedy_generate

RemovedSet = frozenset[Head]
SweepKey = tuple[str, float, str]  # (order name, alpha, gate)


class LRU:
    """A least-recently-used cache of at most `size` entries, counting its hits and misses."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key in self.items:
            self.hits += 1
            self.items.move_to_end(key)
            return self.items[key]
        self.misses += 1
        value = compute()
        self.items[key] = value
        if len(self.items) > self.size:
            self.items.popitem(last=False)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self.items


@dataclass(frozen=True)
class PathwayView:
    """What the explorer shows for one set of removed heads under one gate setting.

    `generation_ids` is the greedy continuation (cut before the first stop token), `tokens` the text
    of each of its tokens. `tracked` has one row per tracked token (the full model's top tokens and
    the targets): `label`, `kind`, `token_id`, `text`, `rank` (1 = top) and `logit` at the last prompt
    position. `lens` is the logit lens of the residual stream (`blocks.L.hook_resid_post` through the
    final norm and the unembedding): one row per (layer, rank) with `token_id`, `token` and `prob`.
    `source` says where it came from: `"sweep"` (a step of a precomputed removal sweep) or `"pass"`.
    """

    removed: RemovedSet
    alpha: float
    gate: str
    generation_ids: tuple[int, ...]
    generation: str
    tokens: tuple[str, ...]
    tracked: pd.DataFrame
    lens: pd.DataFrame
    source: str


class ExplorerRunner:
    """The model, the prompt, the removal orders, their sweeps and the caches of one explorer."""

    def __init__(
        self,
        model: TransformerBridge,
        prompt: str,
        order_or_mask: HeadMask | Sequence[Head] | None,
        *,
        targets: list[int | str],
        top_k: int,
        lens_k: int,
        max_new_tokens: int,
        max_k: int | None,
        seed: int,
        formatted: bool,
        batch_size: int | None,
        cache_size: int,
    ) -> None:
        self.model = model
        self.prompt = prompt
        self.formatted = formatted
        # Resolved now: a target the model cannot track is refused before any pass.
        self.targets: list[int | str] = list(
            target_ids(model, targets, after=prompt_text(model, prompt, formatted=formatted))
        )
        self.top_k = top_k
        self.lens_k = lens_k
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.shape = (model.cfg.n_layers, model.cfg.n_heads)
        self.ids = prompt_ids(model, prompt, formatted=formatted)
        self.prompt_tokens = [token_text(model, t) for t in self.ids]
        self.stops = stop_token_ids(model)
        self.mask: HeadMask | None = None
        n_total = self.shape[0] * self.shape[1]
        # The orders the slider can follow; the first one is the explorer's main order.
        self.orders: dict[str, list[Head]] = {}
        if isinstance(order_or_mask, HeadMask):
            order_or_mask.check_model(model)
            self.mask = order_or_mask
            self.orders["weight"] = order_or_mask.removal_order()
        elif order_or_mask is not None:
            given = check_heads(model, list(order_or_mask), "order_or_mask")
            if len(set(given)) != len(given):
                raise ValueError("the removal order lists a head twice")
            if not given:
                raise ValueError("the removal order is empty")
            self.orders["given"] = given
        self.orders["random"] = random_order(model, seed)
        self.main = next(iter(self.orders))
        shortest = min(len(o) for o in self.orders.values())
        self.max_k = shortest if max_k is None else max_k
        if not 0 < self.max_k <= min(shortest, n_total):
            raise ValueError(f"max_k={max_k} must lie in 1..{shortest} (the removal order's length)")
        if self.targets:
            self.orders["influence"] = []  # derived from the main order's sweep when first asked for
        self.sweeps: dict[SweepKey, RemovalSweep] = {}
        self.views = LRU(cache_size)
        self.lens_rows = LRU(cache_size)
        self.attention_rows = LRU(cache_size)
        self.tracked_tokens: pd.DataFrame | None = None

    # ----------------------------------------------------------------- orders and sweeps
    def order(self, name: str) -> list[Head]:
        """The heads of an order, in removal order (the influence order needs the main sweep at alpha 0)."""
        if name == "influence" and not self.orders["influence"]:
            main = self.sweep(self.main, 0.0, "value")
            self.orders["influence"] = influence_order(main, k=self.max_k)
        return self.orders[name]

    def has_sweep(self, name: str, alpha: float, gate: str) -> bool:
        """Whether the sweep of order `name` under this gate setting is computed already."""
        return (name, alpha, gate) in self.sweeps

    def sweep(self, name: str, alpha: float, gate: Gate, *, progress: bool = False) -> RemovalSweep:
        """The removal sweep of an order's first `max_k` heads under a gate setting (computed once)."""
        key = (name, alpha, gate)
        if key not in self.sweeps:
            order = self.order(name)
            self.sweeps[key] = removal_sweep(
                self.model,
                self.prompt,
                order[: self.max_k],
                target_tokens=self.targets,
                top_k=self.top_k,
                max_new_tokens=self.max_new_tokens,
                batch_size=self.batch_size,
                record_layers=True,
                formatted=self.formatted,
                gate=gate,
                alpha=alpha,
                progress=progress,
            )
            if self.tracked_tokens is None:
                self.tracked_tokens = self.sweeps[key].tokens
        return self.sweeps[key]

    def prefix_step(self, removed: RemovedSet, alpha: float, gate: str) -> tuple[SweepKey, int] | None:
        """A sweep under this setting that holds the set as its first k heads, and that k (or None)."""
        k = len(removed)
        if k > self.max_k:
            return None
        for key, sweep in self.sweeps.items():
            same_setting = key[1:] == (alpha, gate) or k == 0  # step 0 is the full model under any gate
            if same_setting and set(sweep.order[:k]) == removed:
                return key, k
        return None

    # ----------------------------------------------------------------- views
    def view(self, removed: Sequence[Head], alpha: float, gate: Gate) -> PathwayView:
        """What the model does with `removed` gated (cached by set and setting); a head outside the
        model (a negative index too) is a ValueError."""
        heads = frozenset(check_heads(self.model, list(removed), "removed"))
        alpha = check_gate(gate, alpha)
        if not heads:  # nothing gated: every setting is the full model
            alpha, gate = 0.0, "value"
        return self.views.get((heads, alpha, gate), lambda: self._compute_view(heads, alpha, gate))

    def full_view(self) -> PathwayView:
        """The full model (nothing removed): the reference the explorer marks differences against."""
        return self.view((), 0.0, "value")

    def _compute_view(self, heads: RemovedSet, alpha: float, gate: Gate) -> PathwayView:
        tracked = self._tracked()
        found = self.prefix_step(heads, alpha, gate)
        if found is not None:
            key, k = found
            sweep = self.sweeps[key]
            ids = list(sweep.generation_ids[k])
            rows = tracked.assign(
                rank=[int(sweep.ranks[label].iloc[k]) for label in tracked.label],
                logit=[float(sweep.logits[label].iloc[k]) for label in tracked.label],
            )
            assert sweep.block_out is not None  # the explorer's sweeps record the layers
            block_out = sweep.block_out
            lens = self.lens_rows.get((*key, k), lambda: self._lens(block_out[k]))
            return self._make_view(heads, alpha, gate, ids, rows, lens, "sweep")
        mask = torch.ones(self.shape)
        if heads:
            layers, head_index = zip(*heads)
            mask[list(layers), list(head_index)] = 0.0
        out = greedy_generate(
            self.model,
            torch.tensor([self.ids]),
            max_new_tokens=self.max_new_tokens,
            stops=self.stops,
            mask=mask,
            alpha=alpha,
            gate=gate,
            record_layers=True,
        )
        logits = out.first_logits
        ids_t = torch.tensor(tracked.token_id.tolist(), dtype=torch.long)
        rows = tracked.assign(
            rank=token_ranks(logits, ids_t)[0].tolist() if len(ids_t) else [],
            logit=logits[0, ids_t].tolist() if len(ids_t) else [],
        )
        assert out.layers is not None
        resid = torch.stack([out.layers[f"blocks.{l}.hook_resid_post"][0] for l in range(self.shape[0])])
        return self._make_view(heads, alpha, gate, out.tokens[0], rows, self._lens(resid), "pass")

    def _make_view(
        self,
        heads: RemovedSet,
        alpha: float,
        gate: str,
        ids: list[int],
        tracked: pd.DataFrame,
        lens: pd.DataFrame,
        source: str,
    ) -> PathwayView:
        tokenizer = self.model.tokenizer
        return PathwayView(
            removed=heads,
            alpha=alpha,
            gate=gate,
            generation_ids=tuple(ids),
            generation=tokenizer.decode(ids),
            tokens=tuple(token_text(self.model, t) for t in ids),
            tracked=tracked,
            lens=lens,
            source=source,
        )

    def _tracked(self) -> pd.DataFrame:
        if self.tracked_tokens is None:
            self.sweep(self.main, 0.0, "value")
        assert self.tracked_tokens is not None
        return self.tracked_tokens.loc[:, ["label", "kind", "token_id", "text"]]

    def _lens(self, resid: Tensor) -> pd.DataFrame:
        """Top tokens of each layer's residual stream at the last prompt position (the logit lens)."""
        probs = decode_stream(self.model, resid.to(self.model.cfg.device)).float().softmax(-1).cpu()
        top = probs.topk(min(self.lens_k, probs.shape[-1]), dim=-1)
        rows = [
            (layer, rank + 1, int(token), token_text(self.model, int(token)), float(prob))
            for layer in range(probs.shape[0])
            for rank, (token, prob) in enumerate(zip(top.indices[layer], top.values[layer]))
        ]
        return pd.DataFrame(rows, columns=["layer", "rank", "token_id", "token", "prob"])

    # ----------------------------------------------------------------- attention
    def attention(self, removed: Sequence[Head], alpha: float, gate: Gate) -> Tensor:
        """`[n_layers, n_heads, pos]`: every head's attention from the last prompt position (cached)."""
        heads = frozenset(check_heads(self.model, list(removed), "removed"))
        alpha = check_gate(gate, alpha)

        def compute() -> Tensor:
            mask = HeadMask.from_heads(sorted(heads), self.shape) if heads else None
            return last_position_attention(
                self.model,
                self.prompt,
                mask,
                gate=gate if mask is not None else "value",
                alpha=alpha if mask is not None else 0.0,
                formatted=self.formatted,
            )

        return self.attention_rows.get((heads, alpha, gate), compute)

    def target_positions(self) -> list[int]:
        """Prompt positions that hold a target token (where "attention on the target" goes)."""
        tracked = self._tracked()
        targets = set(tracked.loc[tracked.kind == "target", "token_id"].tolist())
        return [i for i, t in enumerate(self.ids) if t in targets]
