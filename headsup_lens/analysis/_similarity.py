"""Layer similarity between settings (Fig. 4) and along a removal sweep (Fig. 5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..gates import Gate, MaskLike
from ..models._sharding import every_rank
from ._common import check_gate_has_mask, gated, prompt_ids
from ._config import SimilarityConfig, configured
from ._sweep import RemovalSweep


@dataclass(frozen=True)
class Setting:
    """One run of the model: a prompt (user text, instruction included when the setting is
    instructed, e.g. `task.user_text(x, instructed=True)`), an optional mask under a gate, and
    the position read (default: the last input token)."""

    prompt: str
    mask: MaskLike | None = None
    gate: Gate = "value"  # checked when the setting runs
    alpha: float = 0.0
    formatted: bool = False
    position: int = -1
    name: str = ""


@dataclass
class LayerStates:
    """Per-layer vectors at one position: `blocks.L.hook_attn_out` and `blocks.L.hook_resid_post`."""

    attn_out: Float[Tensor, "n_layers d_model"]
    block_out: Float[Tensor, "n_layers d_model"]


def as_setting(run: Setting | str) -> Setting:
    if isinstance(run, Setting):
        return run
    if isinstance(run, str):
        return Setting(prompt=run)
    raise ValueError(f"a run must be a Setting or a prompt string, not {type(run).__name__}")


@every_rank
def layer_states(model: TransformerBridge, run: Setting | str) -> LayerStates:
    """Each layer's attention output and block output at the setting's position."""
    setting = as_setting(run)
    check_gate_has_mask(setting.mask, setting.gate, setting.alpha, "Setting ")
    ids = prompt_ids(model, setting.prompt, formatted=setting.formatted)
    if not -len(ids) <= setting.position < len(ids):
        raise ValueError(f"position {setting.position} is outside the prompt's {len(ids)} tokens")
    n_layers = model.cfg.n_layers
    names = {f"blocks.{l}.hook_attn_out" for l in range(n_layers)} | {
        f"blocks.{l}.hook_resid_post" for l in range(n_layers)
    }
    with torch.no_grad(), gated(model, setting.mask, alpha=setting.alpha, gate=setting.gate):
        _, cache = model.run_with_cache(torch.tensor([ids], device=model.cfg.device), names_filter=lambda n: n in names)

    def pick(hook: str) -> Tensor:
        return torch.stack([cache[f"blocks.{l}.{hook}"][0, setting.position] for l in range(n_layers)]).float().cpu()

    return LayerStates(attn_out=pick("hook_attn_out"), block_out=pick("hook_resid_post"))


def cosine(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity along the last dimension, in float64 (a vector with itself gives 1)."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


@every_rank
def layer_similarity(model: TransformerBridge, run_a: Setting | str, run_b: Setting | str) -> pd.DataFrame:
    """Cosine similarity per layer of the attention output and the block output of two settings.

    Returns a table with columns `layer`, `attn_out`, `block_out` (Fig. 4 compares e.g. original vs
    instructed, masked vs instructed, masked vs masked + instructed).
    """
    a, b = layer_states(model, run_a), layer_states(model, run_b)
    return pd.DataFrame(
        {
            "layer": range(model.cfg.n_layers),
            "attn_out": cosine(a.attn_out, b.attn_out).numpy(),
            "block_out": cosine(a.block_out, b.block_out).numpy(),
        }
    )


@every_rank
def setting_similarity(
    model: TransformerBridge,
    prompt: str,
    mask: MaskLike | None = None,
    config: SimilarityConfig | None = None,
    **options: Any,
) -> dict[str, pd.DataFrame]:
    """Fig. 4: `layer_similarity` of each setting with the instructed run, for the user text `prompt`
    (no instruction) and the template `config.instruction` (with `{input}`): "original vs instructed",
    and with a `mask` (under `config.gate`, `config.alpha`) "masked vs instructed" and "masked vs
    masked+instructed". The fields of `config` (a `SimilarityConfig`) may be keyword arguments instead."""
    config = configured(SimilarityConfig, config, options, "setting_similarity")
    if config.instruction is None:
        raise ValueError("setting_similarity needs an instruction template with {input} (instruction=...)")
    instructed_text = config.instruction.replace("{input}", prompt)
    original, instructed = Setting(prompt), Setting(instructed_text)
    comparisons = {"original vs instructed": (original, instructed)}
    if mask is not None:
        masked = Setting(prompt, mask=mask, gate=config.gate, alpha=config.alpha)
        comparisons["masked vs instructed"] = (masked, instructed)
        comparisons["masked vs masked+instructed"] = (
            masked,
            Setting(instructed_text, mask=mask, gate=config.gate, alpha=config.alpha),
        )
    return {name: layer_similarity(model, a, b) for name, (a, b) in comparisons.items()}


def sweep_similarity(sweep: RemovalSweep, reference: LayerStates) -> pd.DataFrame:
    """Fig. 5: per step and layer, cosine of the sweep's layer outputs with a reference setting's
    (e.g. `layer_states(model, instructed_setting)`). The sweep needs `record_layers=True`."""
    if sweep.attn_out is None or sweep.block_out is None:
        raise ValueError("the sweep has no layer outputs; run removal_sweep(..., record_layers=True)")
    if sweep.attn_out.shape[1:] != reference.attn_out.shape:
        raise ValueError(
            f"reference states {tuple(reference.attn_out.shape)} do not match the sweep's {tuple(sweep.attn_out.shape[1:])}"
        )
    attn = cosine(sweep.attn_out, reference.attn_out[None])
    block = cosine(sweep.block_out, reference.block_out[None])
    steps, layers = attn.shape
    return pd.DataFrame(
        {
            "step": [s for s in sweep.steps for _ in range(layers)],
            "layer": list(range(layers)) * steps,
            "attn_out": attn.flatten().numpy(),
            "block_out": block.flatten().numpy(),
        }
    )
