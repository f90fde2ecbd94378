"""Attention functions of the native forward pass, registered with transformers' attention interface.

Both are registered without a mask function: transformers then prepares no attention mask for them
(and skips its check for packed sequences in the position ids, a host synchronisation), and each
builds what it needs from the shapes alone:
- `CAUSAL_ATTENTION`: a loss pass over right-padded rows without a cache (causal attention is exact
  for every real token: padding only follows it);
- `PACKED_ATTENTION`: a loss pass over rows packed into one sequence (`gates._packed`): the query,
  key and value of the packed tokens go back to their rows' padded slots for attention, so the
  projections and MLPs compute no padding while attention stays causal within each row.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ._scope import Scope

CAUSAL_ATTENTION = "headsup_causal_sdpa"
PACKED_ATTENTION = "headsup_packed_sdpa"
# The packed pass running now: (the padded slot of every packed token, rows, width).
_UNPACKING: Scope[tuple[Tensor, int, int]] = Scope()


def mask_free_refusal(module: torch.nn.Module) -> str | None:
    """Why attention built from the shapes alone (causal, banded by a sliding window) would not be
    `module`'s own attention, or None when it is: its attention is chunked (`attention_chunk_size`:
    a query sees its own chunk only, Llama-4) or not causal (bidirectional, e.g. EmbeddingGemma's
    `use_bidirectional_attention`); transformers builds those masks from the model's mask functions."""
    config = getattr(module, "config", None)
    chunk = getattr(module, "attention_chunk_size", None) or getattr(config, "attention_chunk_size", None)
    if chunk:
        return f"its attention is chunked (attention_chunk_size={chunk})"
    if getattr(module, "is_causal", True) is False or getattr(config, "use_bidirectional_attention", False):
        return "its attention is bidirectional (not causal)"
    return None


def _refuse(module: torch.nn.Module) -> None:
    refusal = mask_free_refusal(module)
    if refusal is not None:
        raise ValueError(
            f"the mask-free causal attention of loss passes cannot serve {type(module).__name__}: {refusal}; "
            "such a model's passes need its attention mask (the native pass gives it one)"
        )


def _causal_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """SDPA with the mask of a pass over right-padded rows, built from the shapes alone: causal (the
    `is_causal` kernels), or causal within the layer's sliding window (a key is seen while
    query - key < window, as transformers' sliding-window mask). `attention_mask` is always None
    here: transformers makes none for an attention function without a mask function. Refused for a
    module whose attention is chunked or bidirectional (`mask_free_refusal`)."""
    _refuse(module)
    n = query.shape[-2]
    if sliding_window is None or n <= sliding_window:
        return sdpa_attention_forward(module, query, key, value, None, **kwargs)
    position = torch.arange(n, device=query.device)
    gap = position[:, None] - position[None, :]
    band = (gap >= 0) & (gap < sliding_window)
    return sdpa_attention_forward(module, query, key, value, band[None, None], **kwargs)


def _packed_attention(
    module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None, **kwargs
) -> tuple[Tensor, None]:
    """`_causal_attention` of packed tokens `[1, heads, tokens, d_head]` in their rows' padded slots
    (`unpacking`); the output `[1, tokens, heads, d_head]` as transformers' attention functions
    return it. A padded slot holds zeros and follows its row's tokens: no real token sees it. The
    keyword arguments (the layer's `sliding_window`, SDPA's options) pass through unchanged."""
    _refuse(module)
    current = _UNPACKING.current()
    assert current is not None, "PACKED_ATTENTION runs inside `unpacking` only"
    slots, rows, width = current

    def unpack(x: Tensor) -> Tensor:
        # squeeze, not x[0]: a view whose gradient is a view too (x[0]'s fills a zeroed copy)
        padded = x.new_zeros(rows * width, x.shape[1], x.shape[3]).index_copy(0, slots, x.squeeze(0).transpose(0, 1))
        return padded.view(rows, width, x.shape[1], x.shape[3]).transpose(1, 2)

    out, _ = _causal_attention(module, unpack(query), unpack(key), unpack(value), None, **kwargs)
    return out.reshape(rows * width, *out.shape[2:])[slots][None], None


def unpacking(slots: Tensor, rows: int, width: int) -> contextlib.AbstractContextManager[None]:
    """Inside the block, `PACKED_ATTENTION` puts packed token i in padded slot `slots[i]` of a
    `[rows, width]` batch."""
    return _UNPACKING.holding((slots, rows, width))


def current_unpacking() -> tuple[Tensor, int, int] | None:
    """The `unpacking` block entered last and not yet ended, as its arguments, or None."""
    return _UNPACKING.current()


AttentionInterface.register(CAUSAL_ATTENTION, _causal_attention)
AttentionInterface.register(PACKED_ATTENTION, _packed_attention)
