"""`headsup selfcheck`: build a tiny model, gate it, and confirm the gates reproduce their references."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..gates import query_gate, value_gate
from ..masks import HeadMask
from ..models import char_tokenizer, load_model
from ._registry import command


@dataclass
class SelfCheckConfig:
    """Options of `headsup selfcheck`."""

    seed: int = 0  # seed of the random tiny model and mask


@command("selfcheck", SelfCheckConfig, help="Build a tiny model offline and check the gates on it.")
def run_selfcheck(config: SelfCheckConfig) -> int:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(config.seed)
    tokenizer = char_tokenizer()
    hf_config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with tempfile.TemporaryDirectory() as tmp:
        LlamaForCausalLM(hf_config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        model = load_model(Path(tmp), device="cpu")
    tokens = torch.randint(4, len(tokenizer), (2, 8))
    mask = HeadMask((torch.rand(2, 8) > 0.5).float(), model=None)
    with torch.no_grad():
        original = model(tokens)
        with value_gate(model, HeadMask.full(model)):
            full = model(tokens)
        with value_gate(model, mask):
            gated = model(tokens)
        with query_gate(model, mask):
            queried = model(tokens)
    checks = {
        "full mask leaves logits unchanged": torch.equal(original, full),
        "value gate changes logits": not torch.allclose(original, gated),
        "query gate changes logits": not torch.allclose(original, queried),
    }
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1
