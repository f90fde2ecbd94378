"""Small pieces every analysis shares: prompt formatting, token lookup, head lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._validate import check_int
from ..data import render_prompt
from ..gates import Gate as Gate
from ..gates import gated as gated
from ..masks import Head
from ..models import check_context, encode, prompt_format


def check_gate_has_mask(mask: object, gate: str, alpha: float, where: str = "") -> None:
    """A gate or alpha other than the defaults without a mask would be ignored (the run is
    ungated): a ValueError naming them, rather than an ungated result that looks gated."""
    if mask is not None:
        return
    ignored = [
        f"{name}={value!r}"
        for name, value, default in (("gate", gate, "value"), ("alpha", alpha, 0.0))
        if value != default
    ]
    if ignored:
        raise ValueError(
            f"{where}{' and '.join(ignored)} without a mask: the run would be ungated; pass a mask, or leave them out"
        )


def prompt_text(model: TransformerBridge, prompt: str, *, formatted: bool = False) -> str:
    """The prompt as the model reads it: the user text in the model's prompt format unless `formatted`."""
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("prompt must be a non-empty string")
    return prompt if formatted else render_prompt(model, prompt)


def prompt_ids(model: TransformerBridge, prompt: str, *, formatted: bool = False) -> list[int]:
    """Token ids of a prompt: the user text wrapped in the model's prompt format unless `formatted`."""
    ids = encode(model, prompt_text(model, prompt, formatted=formatted), add_bos=prompt_format(model).add_bos)
    check_context(model, len(ids), "prompt")
    return ids


def token_id(model: TransformerBridge, token: int | str, *, after: str | None = None) -> int:
    """A token given as an id, or as text: the first token of the text as the model would write it.

    With `after` (the formatted prompt), the text is tokenised jointly with the prompt and the first
    token after the prompt is taken: for SentencePiece-style tokenizers the same word alone may
    start with another piece. Text whose first token carries no visible character (a lone "▁" or
    space piece) is a ValueError (pass the token id instead), as is text the tokenizer cannot
    encode (see `models.encode`).
    """
    if isinstance(token, bool):
        raise ValueError(f"token {token!r} is neither an id nor text")
    if isinstance(token, int):
        if not 0 <= token < model.cfg.d_vocab:
            raise ValueError(f"token id {token} is outside the vocabulary (d_vocab={model.cfg.d_vocab})")
        return token
    if not isinstance(token, str):
        raise ValueError(f"token {token!r} is neither an id nor text")
    if not token.strip():
        raise ValueError(f"target text {token!r} is empty or whitespace; pass a token id for whitespace tokens")
    if after is None:
        ids = encode(model, token, add_bos=False)
    else:
        n_prompt = len(encode(model, after, add_bos=False))
        ids = encode(model, after + token, add_bos=False)[n_prompt:]
    if not ids:
        raise ValueError(f"target text {token!r} encodes to no tokens")
    first = int(ids[0])
    if not token_text(model, first).strip():
        raise ValueError(
            f"target text {token!r} starts with the token {token_text(model, first)!r} (id {first}), which carries "
            f"no visible character; pass the text without leading space (e.g. {token.strip()!r}) or the token id"
        )
    return first


def target_ids(model: TransformerBridge, targets: Sequence[int | str], *, after: str) -> list[int]:
    """The token ids of tracked targets (ids, or text whose first token is taken, see `token_id`;
    `after` is the formatted prompt). Two targets of one token are a ValueError: its rank would be
    tracked twice."""
    ids = [token_id(model, t, after=after) for t in targets]
    for i, target in enumerate(ids):
        if target in ids[:i]:
            first = targets[ids.index(target)]
            raise ValueError(
                f"targets {first!r} and {targets[i]!r} are the same token {token_text(model, target)!r} "
                "(text is tracked by its first token): give each token once"
            )
    return ids


def token_text(model: TransformerBridge, token: int) -> str:
    return model.tokenizer.decode([int(token)])


def token_ranks(logits: Tensor, tokens: Tensor) -> Tensor:
    """Rank (1 = top) of each of `tokens` in every row of `logits` [rows, d_vocab] -> [rows, k].

    Ties share the better rank: rank = 1 + number of tokens with a strictly larger logit.
    """
    chosen = logits.gather(1, tokens.to(logits.device).expand(logits.shape[0], -1))
    # One token at a time, counted in int32: the all-at-once `[rows, k, d_vocab]` comparison summed
    # in int64 took ~5x the time (a 40-row sweep over a 128k vocabulary: 0.15 s of CPU) and k times the memory.
    larger = torch.zeros(chosen.shape, dtype=torch.long, device=logits.device)
    for j in range(chosen.shape[1]):
        larger[:, j] = (logits > chosen[:, j, None]).sum(-1, dtype=torch.int32)
    return 1 + larger


def check_heads(model: TransformerBridge, heads: Sequence[Any], name: str = "heads") -> list[Head]:
    """Validate `(layer, head)` pairs against the model; returns them as plain int tuples.
    A non-integer index (1.5, even 1.0) is a TypeError: rounding it would remove another head; a
    negative one is a ValueError (Python would read -1 as the last layer). `name` is the argument
    the pairs came from, for the message."""

    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    checked = []
    for item in heads:
        try:
            layer, head = item
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {item!r} is not a (layer, head) pair") from None
        layer, head = (check_int(f"{name}: the (layer, head) pair {item!r}", v) for v in (layer, head))
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(
                f"{name}: head ({layer}, {head}) is outside this model's {n_layers} x {n_heads} heads "
                f"(layers 0-{n_layers - 1}, heads 0-{n_heads - 1})"
            )
        checked.append((layer, head))
    return checked
