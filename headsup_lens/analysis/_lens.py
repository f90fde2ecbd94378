"""Logit lens (Table 4, Table 41): what each layer's residual stream and attention output would
predict at the last position, with the model's final norm applied before the unembedding (or, as
the reference notebook, without it), and the same read-out compared across settings (Table 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..gates import MaskLike
from ..models import decode_residual, unembed, verify_readout
from ..models._sharding import every_rank
from ._common import check_gate_has_mask, gated, prompt_ids, token_text
from ._config import LENS_STREAMS, LensConfig, configured
from ._similarity import Setting, as_setting

STREAMS = LENS_STREAMS


@dataclass
class LogitLens:
    """`table`: one row per (stream, layer, rank) with token, probability and logit.
    `probs[stream]`: `[rows, d_vocab]` next-token distributions (`n_layers` rows; one for "embed")."""

    prompt: str
    table: pd.DataFrame
    probs: dict[str, Float[Tensor, "n_layers d_vocab"]]


def decode_stream(
    model: TransformerBridge, x: Float[Tensor, "rows d_model"], *, final_norm: bool = True
) -> Float[Tensor, "rows d_vocab"]:
    """Logits of residual-stream vectors: the final norm (weight included), then the unembedding;
    with `final_norm=False` the unembedding alone (the reference notebook's `lm_head(hidden)`)."""
    verify_readout(model)
    with torch.no_grad():
        return decode_residual(model, x) if final_norm else unembed(model, x)


@every_rank
def logit_lens(
    model: TransformerBridge,
    prompt: str,
    k: int | None = None,
    mask: MaskLike | None = None,
    config: LensConfig | None = None,
    *,
    formatted: bool = False,
    **options: Any,
) -> LogitLens:
    """Top-`k` next tokens of each layer at the last prompt position, under an optional gate.

    Streams: `"resid"` = `blocks.L.hook_resid_post` (the block output), `"attn"` =
    `blocks.L.hook_attn_out`, `"embed"` = `blocks.0.hook_resid_pre` (the embedding row, layer 0).
    Each vector goes through `ln_final` and `unembed`. `final_norm=False` reads the un-normed
    residual as the reference notebook does (`lm_head` of Hugging Face's hidden states), where the
    last layer's row is still normed: Hugging Face's last hidden state is the final norm's output.
    With the norm, the resid stream of the last layer is the model's own prediction either way.
    `config` (a `LensConfig`, default its defaults) holds `k`, the gate, alpha, the streams and the
    norm; its fields may be given as keyword arguments instead (`k=5, final_norm=False`).
    """
    config = configured(LensConfig, config, options if k is None else {**options, "k": k}, "logit_lens")
    k, gate, alpha, streams, final_norm = config.k, config.gate, config.alpha, config.streams, config.final_norm
    check_gate_has_mask(mask, gate, alpha)
    ids = prompt_ids(model, prompt, formatted=formatted)
    n_layers = model.cfg.n_layers
    layers = {stream: range(1) if stream == "embed" else range(n_layers) for stream in streams}
    names = [f"blocks.{l}.{STREAMS[s]}" for s in streams for l in layers[s]]
    with torch.no_grad(), gated(model, mask, alpha=alpha, gate=gate):
        _, cache = model.run_with_cache(torch.tensor([ids], device=model.cfg.device), names_filter=lambda n: n in names)
    rows, probs = [], {}
    k = min(k, model.cfg.d_vocab)
    for stream in streams:
        vectors = torch.stack([cache[f"blocks.{l}.{STREAMS[stream]}"][0, -1] for l in layers[stream]])
        logits = decode_stream(model, vectors, final_norm=final_norm).float()
        if not final_norm and stream == "resid":  # the model's output row, normed as the reference's last hidden state
            logits[-1] = decode_stream(model, vectors[-1:]).float()[0]
        probs[stream] = logits.softmax(-1).cpu()
        top = probs[stream].topk(k, dim=-1)
        for layer in layers[stream]:
            for rank in range(k):
                token = int(top.indices[layer, rank])
                rows.append(
                    (
                        stream,
                        layer,
                        rank + 1,
                        token,
                        token_text(model, token),
                        float(top.values[layer, rank]),
                        float(logits[layer, token]),
                    )
                )
    table = pd.DataFrame(rows, columns=["stream", "layer", "rank", "token_id", "token", "prob", "logit"])
    return LogitLens(prompt=model.tokenizer.decode(ids), table=table, probs=probs)


@every_rank
def lens_comparison(
    model: TransformerBridge,
    settings: dict[str, Setting | str],
    k: int = 5,
    *,
    reference: str | None = None,
    final_norm: bool = True,
) -> pd.DataFrame:
    """Table 4: the logit lens of several settings side by side (e.g. original, instructed, masked).

    One row per layer of the residual stream (the embedding first, as layer -1) with each
    setting's top-`k` tokens (`<name>` column, joined by " | ") and, against the `reference`
    setting (default: the second one, the instructed run when settings are original / instructed
    / masked), `<name> top1 = reference` and `<name> top-k overlap` (shared tokens / k).
    """
    if len(settings) < 2:
        raise ValueError(f"lens_comparison needs at least two settings, got {list(settings)}")
    names = list(settings)
    reference = names[1] if reference is None else reference
    if reference not in settings:
        raise ValueError(f"reference {reference!r} is not one of the settings {names}")
    tops: dict[str, list[list[int]]] = {}
    for name, given in settings.items():
        run = as_setting(given)
        if run.position != -1:
            raise ValueError(f"setting {name!r}: the logit lens reads the last position only")
        lens = logit_lens(
            model,
            run.prompt,
            k,
            run.mask,
            gate=run.gate,
            alpha=run.alpha,
            formatted=run.formatted,
            streams=("embed", "resid"),
            final_norm=final_norm,
        )
        tops[name] = [
            p.topk(min(k, model.cfg.d_vocab)).indices.tolist()
            for p in torch.cat([lens.probs["embed"], lens.probs["resid"]])
        ]
    rows = []
    for row in range(model.cfg.n_layers + 1):
        entry: dict = {"layer": row - 1}
        for name in names:
            entry[name] = " | ".join(token_text(model, t) for t in tops[name][row])
        for name in names:
            if name != reference:
                mine, theirs = tops[name][row], tops[reference][row]
                entry[f"{name} top1 = {reference}"] = mine[0] == theirs[0]
                entry[f"{name} top-k overlap"] = len(set(mine) & set(theirs)) / len(mine)
        rows.append(entry)
    return pd.DataFrame(rows)
