"""Small randomly initialised models saved as Hugging Face directories (self-check, tests, benchmarks).

They are built to look like trained models where that matters to the project's numbers: norm gains
and biases drawn away from 1 and 0 (a read-out that skips the final norm's weight, or a bias, gives
wrong logits), untied input and output embeddings (as most real Llama/Qwen models have).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

import torch
import transformers

from ._tokenizers import char_tokenizer

_Module = TypeVar("_Module", bound=torch.nn.Module)


def realistic_(model: _Module, seed: int = 0) -> _Module:
    """Draw every norm gain from U(0.5, 2.5) and every bias from N(0, 0.3), in place."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            is_norm = "norm" in name.lower() or ".ln_" in name or name.startswith("ln_") or ".ln_f" in name
            if is_norm and name.endswith("weight"):
                parameter.copy_(0.5 + 2.0 * torch.rand(parameter.shape, generator=generator))
                continue
            if name.endswith("bias"):
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


# The architectures a tiny model is built in: the transformers config and model class, and the config
# fields each sets apart from the shared ones (`random_llama_dir`).
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),  # q/k/v biases
    # QK-norm, sliding-window layers with a global one every third, sandwich norms, tied embeddings as
    # in Gemma-3-270M, d_head set apart from d_model / n_heads; a window shorter than the tests'
    # sequences, so that the sliding layers really differ.
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=6,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            tie_word_embeddings=True,
        ),
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=8)),  # QK-norm; d_head = d_model / n_heads
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),  # fused qkv and gate/up projections
}


def random_llama_dir(
    path: str | os.PathLike, seed: int = 0, *, tokenizer=None, architecture: str = "llama", **overrides
) -> Path:
    """A grouped-query decoder (default 2 layers x 8 query heads over 2 KV heads, d_model 64) saved to
    `path`, with realistic norm gains and biases (`realistic_`) and untied embeddings.

    `architecture`: one of `ARCHITECTURES`: "llama" (no biases), "qwen2" (q/k/v biases), "gemma3"
    (Gemma-3's text model, tied embeddings as in Gemma-3-270M), "mistral", "qwen3" or "phi3";
    `tokenizer` defaults to the character tokenizer; `overrides` are config fields.
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {sorted(ARCHITECTURES)}, not {architecture!r}")
    tokenizer = tokenizer or char_tokenizer()
    config_name, model_name, specific = ARCHITECTURES[architecture]
    settings = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    settings.update(specific)
    settings.update(overrides)
    torch.manual_seed(seed)
    config = getattr(transformers, config_name)(**settings)
    model = realistic_(getattr(transformers, model_name)(config), seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)
