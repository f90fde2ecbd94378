"""Greedy decoding at fixed shapes on the native forward pass, replayed as one CUDA graph per token.

On a GPU a decoding step of a large model is a few milliseconds of matrix work behind about a
thousand kernel launches, each issued by Python: the launches, not the GPU, set the pace. Here
every decoding step has the same shapes and reads nothing back, so the whole step (the model's
forward pass with its gates, the argmax, the stop flags) is captured once as a CUDA graph and
replayed for every later token:
- the KV cache is transformers' `StaticCache`, preallocated for the prompt, the new tokens and the
  reference answers; its write position is a device counter (`cumulative_length`) that advances in
  place, so a replayed step writes the next slot;
- attention gets an explicit additive mask `[batch, 1, query, slots]` (transformers passes a 4-D mask
  through unchanged): a query at slot s sees the valid keys at slots <= s and always its own slot,
  so a left-padding query stays finite;
- rows that stop keep decoding (their tokens are cut at the stop token), so no shape changes; the
  stop flags are read back every `check_every` tokens to end early.
The cache and every tensor the step reads live in buffers kept per bucket (`StaticDecoding`: the rows,
the cache's slots rounded up, the token budget, the gate's layout), into which each decoding copies its
inputs: the chunks of an evaluation and repeated calls replay the step captured at the bucket's first
decoding (`Decodings`, a few per model, dropped when the weights move).
The same step runs eagerly on the CPU (`native_options(static_cache=True)`), which is how the tests
check it against the dynamic cache and the bridge. A capture that fails (an architecture whose step
reads the device back, say) warns and decodes eagerly: the same steps, launched one by one.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformers import StaticCache

from .._typecheck import checked
from ._graph import Replay
from ._paths import Decoding, GateSpec


@checked
def slot_mask(
    valid: Bool[Tensor, "batch slots"], slots: Int[Tensor, " query"], dtype: torch.dtype
) -> Float[Tensor, "batch 1 query slots"]:
    """The additive attention mask of queries at cache `slots`: 0 where a query sees a key (a valid
    key at a slot <= its own, or its own slot), the dtype's lowest value elsewhere."""
    keys = torch.arange(valid.shape[1], device=valid.device)
    causal = keys[None, :] <= slots[:, None]
    own = keys[None, :] == slots[:, None]
    seen = (valid[:, None, None, :] & causal[None, None]) | own[None, None]
    return torch.zeros(seen.shape, dtype=dtype, device=valid.device).masked_fill_(~seen, torch.finfo(dtype).min)


def answer_states(
    hf: Any, answers: Int[Tensor, "batch answer"], cache: Any, next_position: Tensor, mask: Callable[[int], Any]
) -> Float[Tensor, "batch n d_model"] | None:
    """The final norm's output after each answer token but the last (`answers`: right-padded with
    -1, as `Decoding.answers`), teacher-forced from `next_position` on a copy of the prompt pass's
    `cache` (the first answer token is scored by the prompt pass's logits); None when every answer
    is one token. `mask(n)`: the attention mask of `n` answer tokens after the prompt. Right padding
    needs no mask of its own: a real answer token sees only the real tokens before it."""
    if answers.shape[1] < 2:
        return None
    feed = answers[:, :-1].clamp(min=0)
    n = feed.shape[1]
    return hf.base_model(
        input_ids=feed,
        attention_mask=mask(n),
        position_ids=next_position + torch.arange(n, device=feed.device),
        past_key_values=copy.deepcopy(cache),
        use_cache=True,
    ).last_hidden_state


def fits(configs: Iterable[Any], slots: int) -> bool:
    """Whether a static cache of `slots` keeps every key in slot order under the model's `configs`
    (its own and its attention modules'): no sliding window or attention chunk shorter than `slots`
    (a full sliding layer rolls its keys, which one mask over slots cannot follow)."""
    windows = [getattr(c, name, None) for c in configs for name in ("sliding_window", "attention_chunk_size")]
    return all(w is None or w >= slots for w in windows)


def cache_slots(job: Decoding) -> int:
    """The static cache's length for `job`: decoding writes slots `length .. length + max_new_tokens
    - 2` (the first new token comes from the prompt pass), the answers `length .. length + answer - 2`."""
    answer = 0 if job.answers is None else job.answers.shape[1] - 1
    return job.ids.shape[1] + max(job.max_new_tokens - 1, answer, 0)


# Cache lengths are rounded up to a multiple of this: decodings of prompts of similar length (the
# chunks of an evaluation) share one set of buffers and one captured step.
SLOT_BUCKET = 32
# Fixed-shape decodings kept per model (each holds its KV cache and, on a GPU, its graph's memory).
KEPT = 4


def bucket_slots(slots: int) -> int:
    """`slots` rounded up to a multiple of `SLOT_BUCKET`: a longer cache only adds masked slots."""
    return -(-slots // SLOT_BUCKET) * SLOT_BUCKET


def spec_layout(spec: GateSpec | None) -> tuple | None:
    """What a captured step's gate reads, without its values: each tensor's shape and dtype, or None."""
    if spec is None:
        return None
    return tuple(None if t is None else (tuple(t.shape), t.dtype) for t in (spec.heads, spec.mean, spec.mlp))


def decoding_key(job: Decoding, graph: bool, compiled: bool) -> tuple:
    """The bucket of `job`: what fixes the shapes and addresses a decoding step reads (rows, cache
    slots rounded up, new tokens, the gate's layout, the stop tokens' count) and how it runs."""
    rows = job.ids.shape[0]
    return (
        rows,
        bucket_slots(cache_slots(job)),
        job.max_new_tokens,
        spec_layout(job.spec),
        job.stop_ids.numel(),
        graph,
        compiled,
    )


class StaticDecoding:
    """The buffers of fixed-shape greedy decodings of one bucket (`decoding_key`) on the Hugging Face
    model `hf`, and their step, captured once and replayed by every later decoding that fits: the
    static KV cache, the slot validity, the gate, the stop tokens, the decoding state and the tokens
    written, each at a fixed address. A decoding copies its inputs in (`load`) and empties the cache.
    `step_fn`: the step's forward pass (default `static_step`; compiled on request)."""

    def __init__(self, hf: Any, job: Decoding, graph: bool, step_fn: Callable | None) -> None:
        self.hf, self.graph, self.step_fn = hf, graph, step_fn or static_step
        device = job.ids.device
        rows = job.ids.shape[0]
        self.slots = bucket_slots(cache_slots(job))
        self.cache = StaticCache(config=hf.config, max_cache_len=self.slots)
        self.valid = torch.ones(rows, self.slots, dtype=torch.bool, device=device)
        self.stop_ids = torch.zeros_like(job.stop_ids, device=device)
        spec = job.spec
        self.spec = None
        if spec is not None:

            def staged(t: Tensor | None) -> Tensor | None:
                return None if t is None else torch.zeros_like(t, device=device)

            self.spec = GateSpec(heads=staged(spec.heads), mean=staged(spec.mean), mlp=staged(spec.mlp))
        self.tokens = torch.zeros(rows, max(1, job.max_new_tokens), dtype=torch.long, device=device)
        self.state = _State(
            ids=torch.zeros(rows, 1, dtype=torch.long, device=device),
            position=torch.zeros(rows, 1, dtype=torch.long, device=device),
            slot=torch.zeros(1, dtype=torch.long, device=device),
            column=torch.zeros(1, dtype=torch.long, device=device),
            stopped=torch.zeros(rows, dtype=torch.bool, device=device),
        )
        self.dtype = next(hf.parameters()).dtype
        self.replay = Replay(self._step, enabled=graph, what="decoding step")
        self.length = 0
        self.decodings = 0  # how many decodings used these buffers (tests read it)

    def load(self, job: Decoding) -> None:
        """Copy `job`'s prompt mask, stop tokens and gate into the buffers (on the device, nothing read
        back) and empty the cache: the prompt fills slots 0..length - 1, decoding the next ones."""
        self.length = job.ids.shape[1]
        self.valid.fill_(True)
        if job.attention_mask is not None:
            self.valid[:, : self.length].copy_(job.attention_mask.bool(), non_blocking=True)
        self.stop_ids.copy_(job.stop_ids, non_blocking=True)
        if self.spec is not None and job.spec is not None:
            for buffer, values in zip(
                (self.spec.heads, self.spec.mean, self.spec.mlp), (job.spec.heads, job.spec.mean, job.spec.mlp)
            ):
                if buffer is not None and values is not None:
                    buffer.copy_(values, non_blocking=True)
        self.cache.reset()
        self.decodings += 1

    def prompt(self, ids: Tensor, positions: Tensor) -> Tensor:
        """The prompt pass into the cache: the last position's logits `[batch, d_vocab]`."""
        slots = torch.arange(self.length, device=self.valid.device)
        return self.hf(
            input_ids=ids,
            attention_mask=slot_mask(self.valid, slots, self.dtype),
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]

    def answer_states(self, answers: Tensor, next_position: Tensor) -> Tensor | None:
        """`answer_states` on a copy of the prompt pass's static cache (a slot mask for the answers)."""

        def mask(n: int) -> Tensor:
            return slot_mask(self.valid, self.length + torch.arange(n, device=self.valid.device), self.dtype)

        return answer_states(self.hf, answers, self.cache, next_position, mask)

    def _step(self) -> None:
        """One token at fixed shapes, reading and advancing the buffers in place, nothing read back:
        what a CUDA graph captures."""
        state = self.state
        logits = self.step_fn(self.hf, self.cache, self.valid, self.dtype, state.ids, state.position, state.slot)
        chosen = logits.argmax(-1)
        self.tokens.index_copy_(1, state.column, chosen[:, None])
        state.stopped.logical_or_((chosen[:, None] == self.stop_ids[None, :]).any(-1))
        state.ids.copy_(chosen[:, None])
        state.position.add_(1)
        state.slot.add_(1)
        state.column.add_(1)

    def decode(
        self,
        first: Tensor,
        next_position: Tensor,
        max_new_tokens: int,
        check_every: int,
        on_pass: Callable[[], object] | None,
    ) -> tuple[Tensor, int]:
        """The new tokens `[batch, max_new_tokens]` (the buffer: read it before the next decoding), the
        first being `first` (the prompt pass's argmax), and how many columns were decoded before every
        row stopped; `on_pass` is called after every step. On a GPU the step is captured at this bucket's
        first decoding and replayed from then on."""
        state = self.state
        self.tokens[:, 0].copy_(first)
        state.ids.copy_(first[:, None])
        state.position.copy_(next_position)
        state.slot.fill_(self.length)
        state.column.fill_(1)
        state.stopped.copy_((first[:, None] == self.stop_ids[None, :]).any(-1))
        taken = max_new_tokens
        for column in range(1, max_new_tokens):
            self.replay()
            if on_pass is not None:
                on_pass()
            checking = (column + 1) % check_every == 0 and column < max_new_tokens - 1
            # The one host synchronisation of these check_every tokens:
            if checking and all(state.stopped.tolist()):
                taken = column + 1
                break
        return self.tokens, taken


class Decodings:
    """The fixed-shape decodings kept for one model, by bucket (`decoding_key`), at most `KEPT` (the
    least recently used goes first). They read the model's weights where they were when they were
    built: when a weight or buffer moves (another dtype or device, a tensor replaced) all are dropped."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        self.kept: OrderedDict[tuple, StaticDecoding] = OrderedDict()
        self.weights: tuple | None = None

    def _where(self) -> tuple:
        return tuple(t.data_ptr() for t in (*self.hf.parameters(), *self.hf.buffers()))

    def get(self, key: tuple, build: Callable[[], StaticDecoding]) -> StaticDecoding:
        where = self._where()
        if where != self.weights:
            self.kept.clear()
            self.weights = where
        found = self.kept.pop(key, None)
        if found is None:
            found = build()
            while len(self.kept) >= KEPT:
                self.kept.popitem(last=False)
        self.kept[key] = found
        return found

    def clear(self) -> None:
        self.kept.clear()


def static_step(
    hf: Any, cache: StaticCache, valid: Tensor, dtype: torch.dtype, ids: Tensor, position: Tensor, slot: Tensor
) -> Tensor:
    """One decoding step at fixed shapes: the next-token logits `[batch, d_vocab]` of `ids` `[batch, 1]`
    at `position` `[batch, 1]`, written to the cache at `slot` `[1]` (what `torch.compile` compiles)."""
    return hf(
        input_ids=ids,
        attention_mask=slot_mask(valid, slot, dtype),
        position_ids=position,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1]


@dataclass(frozen=True)
class _State:
    """The device tensors a decoding step reads and advances in place (fixed addresses: a replayed
    CUDA graph reads them where the capture found them)."""

    ids: Tensor
    position: Tensor
    slot: Tensor
    column: Tensor
    stopped: Tensor
