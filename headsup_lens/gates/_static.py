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
The same step runs eagerly on the CPU (`native_options(static_cache=True)`), which is how the tests
check it against the dynamic cache and the bridge. A capture that fails (an architecture whose step
reads the device back, say) warns and decodes eagerly: the same steps, launched one by one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformers import StaticCache

from .._typecheck import checked
from ._graph import Replay
from ._paths import Decoding


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


class StaticDecoding:
    """One fixed-shape greedy decoding of `job` on the Hugging Face model `hf` (gates in place)."""

    def __init__(self, hf: Any, job: Decoding, positions: Tensor, dtype: torch.dtype) -> None:
        self.hf, self.job = hf, job
        batch, self.length = job.ids.shape
        device = job.ids.device
        self.slots = cache_slots(job)
        self.cache = StaticCache(config=hf.config, max_cache_len=self.slots)
        self.valid = torch.ones(batch, self.slots, dtype=torch.bool, device=device)
        if job.attention_mask is not None:
            self.valid[:, : self.length] = job.attention_mask.bool()
        self.positions, self.dtype = positions, dtype

    def prompt(self) -> Tensor:
        """The prompt pass into the cache: the last position's logits `[batch, d_vocab]`."""
        slots = torch.arange(self.length, device=self.valid.device)
        return self.hf(
            input_ids=self.job.ids,
            attention_mask=slot_mask(self.valid, slots, self.dtype),
            position_ids=self.positions,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]

    def answer_states(self, next_position: Tensor) -> Tensor | None:
        """`answer_states` on a copy of the prompt pass's static cache (a slot mask for the answers)."""
        assert self.job.answers is not None

        def mask(n: int) -> Tensor:
            return slot_mask(self.valid, self.length + torch.arange(n, device=self.valid.device), self.dtype)

        return answer_states(self.hf, self.job.answers, self.cache, next_position, mask)

    def decode(
        self, first: Tensor, next_position: Tensor, check_every: int, graph: bool, step_fn: Callable | None = None
    ) -> tuple[Tensor, int]:
        """The new tokens `[batch, max_new_tokens]`, the first being `first` (the prompt pass's
        argmax), and how many columns were decoded before every row stopped. `graph`: capture the
        step as a CUDA graph and replay it (`step_fn`: the step's forward pass, default `static_step`)."""
        job = self.job
        device = first.device
        tokens = torch.zeros(first.shape[0], job.max_new_tokens, dtype=torch.long, device=device)
        tokens[:, 0] = first
        state = _State(
            ids=first[:, None].clone(),
            position=next_position.clone(),
            slot=torch.full((1,), self.length, dtype=torch.long, device=device),
            column=torch.ones(1, dtype=torch.long, device=device),
            stopped=(first[:, None] == job.stop_ids[None, :]).any(-1),
        )

        def step() -> None:  # fixed shapes, nothing read back: what a CUDA graph captures
            logits = (step_fn or static_step)(
                self.hf, self.cache, self.valid, self.dtype, state.ids, state.position, state.slot
            )
            chosen = logits.argmax(-1)
            tokens.index_copy_(1, state.column, chosen[:, None])
            state.stopped.logical_or_((chosen[:, None] == job.stop_ids[None, :]).any(-1))
            state.ids.copy_(chosen[:, None])
            state.position.add_(1)
            state.slot.add_(1)
            state.column.add_(1)

        replay = Replay(step, enabled=graph, what="decoding step")
        taken = job.max_new_tokens
        for column in range(1, job.max_new_tokens):
            replay()
            if job.on_pass is not None:
                job.on_pass()
            checking = (column + 1) % check_every == 0 and column < job.max_new_tokens - 1
            # The one host synchronisation of these check_every tokens:
            if checking and all(state.stopped.tolist()):
                taken = column + 1
                break
        return tokens, taken


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
