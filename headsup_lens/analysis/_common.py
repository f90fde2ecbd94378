"""Small pieces every analysis shares: prompt formatting, token lookup, head lists."""

from __future__ import annotations

from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..data import encode_prompt
from ..masks import Head
from ..models import chat_template, encode
from ..gates import gated as gated
from ..gates import Gate as Gate


def prompt_ids(model: TransformerBridge, prompt: str, *, formatted: bool = False) -> list[int]:
    """Token ids of a prompt: the user text wrapped in the chat template unless `formatted`."""
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("prompt must be a non-empty string")
    if not formatted:
        return encode_prompt(model, prompt)
    return encode(model, prompt, add_bos=chat_template(model).add_bos)


def token_id(model: TransformerBridge, token: int | str) -> int:
    """A token given as an id or as text (its first token, encoded without BOS)."""
    if isinstance(token, bool):
        raise ValueError(f"token {token!r} is neither an id nor text")
    if isinstance(token, int):
        if not 0 <= token < model.cfg.d_vocab:
            raise ValueError(f"token id {token} is outside the vocabulary (d_vocab={model.cfg.d_vocab})")
        return token
    if isinstance(token, str):
        ids = encode(model, token, add_bos=False)
        if not ids:
            raise ValueError(f"target text {token!r} encodes to no tokens")
        return int(ids[0])
    raise ValueError(f"token {token!r} is neither an id nor text")


def token_text(model: TransformerBridge, token: int) -> str:
    return model.tokenizer.decode([int(token)])


def token_ranks(logits: Tensor, tokens: Tensor) -> Tensor:
    """Rank (1 = top) of each of `tokens` in every row of `logits` [rows, d_vocab] -> [rows, k].

    Ties share the better rank: rank = 1 + number of tokens with a strictly larger logit.
    """
    chosen = logits.gather(1, tokens.to(logits.device).expand(logits.shape[0], -1))
    return 1 + (logits[:, None, :] > chosen[:, :, None]).sum(-1)


def check_heads(model: TransformerBridge, heads: list[Head]) -> list[Head]:
    """Validate `(layer, head)` pairs against the model; returns them as plain int tuples."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    checked = []
    for item in heads:
        try:
            layer, head = (int(v) for v in item)
        except (TypeError, ValueError):
            raise ValueError(f"{item!r} is not a (layer, head) pair") from None
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(f"head ({layer}, {head}) is outside this model's {n_layers} x {n_heads} heads")
        checked.append((layer, head))
    return checked
