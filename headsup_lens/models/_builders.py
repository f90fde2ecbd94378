"""Small randomly initialised models saved as Hugging Face directories (self-check, tests, benchmarks).

They are built to look like trained models where that matters to the project's numbers: norm gains
and biases drawn away from 1 and 0 (a read-out that skips the final norm's weight, or a bias, gives
wrong logits), untied input and output embeddings (as most real Llama/Qwen models have).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import torch

from .._typecheck import checked
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


@checked
def random_llama_dir(
    path: str | os.PathLike, seed: int = 0, *, tokenizer=None, architecture: str = "llama", **overrides
) -> Path:
    """A grouped-query decoder (default 2 layers x 8 query heads over 2 KV heads, d_model 64) saved to
    `path`, with realistic norm gains and biases (`realistic_`) and untied embeddings.

    `architecture`: "llama" (no biases), "qwen2" (q/k/v biases) or "gemma3" (Gemma-3's text model:
    QK-norm, sliding-window layers with a global one every third, sandwich norms, tied embeddings
    as in Gemma-3-270M; d_head 16 set apart from d_model / n_heads); `tokenizer` defaults to the
    character tokenizer; `overrides` are config fields.
    """
    from transformers import (  # deferred: heavy
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    tokenizer = tokenizer or char_tokenizer()
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
    if architecture == "gemma3":
        # A window shorter than the tests' sequences, so that the sliding layers really differ.
        settings.update(
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=6,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            tie_word_embeddings=True,
        )
    settings.update(overrides)
    classes = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
    }
    if architecture not in classes:
        raise ValueError(f"architecture must be one of {sorted(classes)}, not {architecture!r}")
    config_class, model_class = classes[architecture]
    torch.manual_seed(seed)
    model = realistic_(model_class(config_class(**settings)), seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)
