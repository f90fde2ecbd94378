"""Logit lens (Table 4, Table 41): what each layer's residual stream and attention output would
predict at the last position, with the model's final norm applied before the unembedding."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..gates import MaskLike
from ..models import decode_residual, verify_readout
from ._common import Gate, gated, prompt_ids, token_text

STREAMS = {"resid": "hook_resid_post", "attn": "hook_attn_out"}


@dataclass
class LogitLens:
    """`table`: one row per (stream, layer, rank) with token, probability and logit.
    `probs[stream]`: `[n_layers, d_vocab]` next-token distributions."""

    prompt: str
    table: pd.DataFrame
    probs: dict[str, Float[Tensor, "n_layers d_vocab"]]


def decode_stream(model: TransformerBridge, x: Float[Tensor, "rows d_model"]) -> Float[Tensor, "rows d_vocab"]:
    """Logits of residual-stream vectors: the final norm (weight included), then the unembedding."""
    verify_readout(model)
    with torch.no_grad():
        return decode_residual(model, x)


def logit_lens(
    model: TransformerBridge,
    prompt: str,
    k: int = 10,
    mask: MaskLike | None = None,
    *,
    gate: Gate = "value",
    alpha: float = 0.0,
    formatted: bool = False,
    streams: tuple[str, ...] = ("resid", "attn"),
) -> LogitLens:
    """Top-`k` next tokens of each layer at the last prompt position, under an optional gate.

    Streams: `"resid"` = `blocks.L.hook_resid_post` (the block output), `"attn"` =
    `blocks.L.hook_attn_out`. Each vector goes through `ln_final` and `unembed` (the reference
    notebook skipped the norm). The resid stream of the last layer is the model's own prediction.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    unknown = [s for s in streams if s not in STREAMS]
    if unknown or not streams:
        raise ValueError(f"unknown streams {unknown}; choose from {sorted(STREAMS)}")
    ids = prompt_ids(model, prompt, formatted=formatted)
    names = [f"blocks.{l}.{STREAMS[s]}" for s in streams for l in range(model.cfg.n_layers)]
    with torch.no_grad(), gated(model, mask, alpha=alpha, gate=gate):
        _, cache = model.run_with_cache(torch.tensor([ids], device=model.cfg.device), names_filter=lambda n: n in names)
    rows, probs = [], {}
    k = min(k, model.cfg.d_vocab)
    for stream in streams:
        vectors = torch.stack([cache[f"blocks.{l}.{STREAMS[stream]}"][0, -1] for l in range(model.cfg.n_layers)])
        logits = decode_stream(model, vectors).float()
        probs[stream] = logits.softmax(-1).cpu()
        top = probs[stream].topk(k, dim=-1)
        for layer in range(model.cfg.n_layers):
            for rank in range(k):
                token = int(top.indices[layer, rank])
                rows.append((stream, layer, rank + 1, token, token_text(model, token),
                             float(top.values[layer, rank]), float(logits[layer, token])))
    table = pd.DataFrame(rows, columns=["stream", "layer", "rank", "token_id", "token", "prob", "logit"])
    return LogitLens(prompt=model.tokenizer.decode(ids), table=table, probs=probs)
