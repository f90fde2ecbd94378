"""The model's own read-out: final norm (with its weight and bias), unembedding (with its bias) and
final soft-capping, applied to chosen positions only."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

FINAL_NORM_OUT = "ln_final.hook_out"  # after the norm's weight; `hook_normalized` is before it
_VERIFIED = "_headsup_readout_verified"


def unembed(model: TransformerBridge, normed: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_vocab"]:
    """Logits of final-norm outputs (`ln_final.hook_out`): the unembedding, then soft-capping as the
    model does it (Gemma-2)."""
    logits = model.unembed(normed)
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0) or -1.0
    if cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits


def decode_residual(model: TransformerBridge, resid: Float[Tensor, "rows d_model"]) -> Float[Tensor, "rows d_vocab"]:
    """Logits of residual-stream vectors: the final norm, then `unembed` (the logit lens)."""
    return unembed(model, model.ln_final(resid[:, None, :]))[:, 0]


def verify_readout(model: TransformerBridge) -> None:
    """Check once per model that `unembed(ln_final.hook_out)` reproduces `model(tokens)`.

    Analyses and losses read out only the positions they need; an architecture whose read-out has
    a step this module does not know (a logit scale, say) would make them silently wrong.
    """
    if getattr(model, _VERIFIED, False):
        return
    if FINAL_NORM_OUT not in model.hook_dict:
        raise ValueError(f"this model has no {FINAL_NORM_OUT} hook; its logits cannot be read out per position")
    tokens = torch.arange(1, 6, device=model.cfg.device)[None] % model.cfg.d_vocab
    captured: list[Tensor] = []
    with torch.no_grad(), model.hooks(fwd_hooks=[(FINAL_NORM_OUT, lambda x, hook: captured.append(x))]):
        logits = model(tokens)
    if not torch.isfinite(logits).all():  # else the tolerance below is NaN and torch's error says nothing useful
        raise ValueError(
            "this model's logits on a probe input hold NaN or infinite values: its weights or activations are "
            "not finite (a diverged fine-tuning run, a corrupt checkpoint, an overflowing dtype); no analysis "
            "or loss can be computed from them"
        )
    ours = unembed(model, captured[0]).float()
    scale = logits.float().abs().max().clamp_min(1.0)
    if not torch.allclose(ours, logits.float(), atol=1e-3 * float(scale), rtol=1e-3):
        raise ValueError(
            "reading out the final norm's output does not reproduce this model's logits "
            f"(max difference {float((ours - logits.float()).abs().max()):.3g}); the architecture has a read-out "
            "step headsup_lens does not know"
        )
    object.__setattr__(model, _VERIFIED, True)
