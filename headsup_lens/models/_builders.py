"""Small randomly initialised models saved as Hugging Face directories (self-check, tests, benchmarks)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ._tokenizers import char_tokenizer


def random_llama_dir(path: str | os.PathLike, seed: int = 0, **overrides) -> Path:
    """A grouped-query Llama (default 2 layers x 8 query heads over 2 KV heads, d_model 64) with the
    character tokenizer, saved to `path`; `overrides` are `LlamaConfig` fields."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = char_tokenizer()
    settings = dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    settings.update(overrides)
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(**settings)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)
