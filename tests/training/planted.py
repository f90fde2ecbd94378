"""A tiny Llama whose right mask is known: "suppressor" heads write against the answer.

Every token embedding carries a large shared component e0, and every value projection reads only
e0, so each head outputs (almost) the same z whatever it attends to. Through `o_proj` helper
heads write +direction a, suppressor heads write -a, every other head writes nothing; the
unembedding gives the answer token ("X") and end of turn the logit c * a. With all heads the
net write is negative and the answer is suppressed; removing exactly the suppressors is optimal.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

import torch

from headsup_lens.data import Task

from ..conftest import build_llama_dir

SUPPRESSORS = ((0, 2), (1, 5), (2, 1), (3, 6))
HELPERS = ((0, 0), (1, 3), (3, 7))
N_LAYERS, N_HEADS, D_HEAD = 4, 8, 8


def build_planted_dir(path: Path) -> Path:
    from transformers import LlamaForCausalLM

    build_llama_dir(path, num_hidden_layers=N_LAYERS, seed=1)
    model = LlamaForCausalLM.from_pretrained(path)
    from headsup_lens.models import char_tokenizer

    tokenizer = char_tokenizer()
    answer_ids = [tokenizer.convert_tokens_to_ids("X"), tokenizer.eos_token_id]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed.copy_(0.1 * torch.randn(embed.shape, generator=generator))
        embed[:, 0] = 10.0  # e0: the shared component every value projection reads
        embed[:, 1] = 0.0  # a: the answer direction, written only by heads
        model.lm_head.weight.zero_()
        model.lm_head.weight[answer_ids[0], 1] = 3.0  # "X" edges out end of turn: greedy output starts with X
        model.lm_head.weight[answer_ids[1], 1] = 2.5
        # After an "X" the turn ends: the token's own embedding carries an end-of-turn direction (e2), so
        # the answer is the word "X", not a run of them (the paper's protocol reads whole words).
        embed[:, 2] = 0.0
        embed[answer_ids[0], 2] = 10.0
        model.lm_head.weight[answer_ids[1], 2] = 3.0
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.zero_()
            layer.self_attn.v_proj.weight.zero_()
            layer.self_attn.v_proj.weight[:, 0] = 1.0 / 8
            layer.self_attn.o_proj.weight.zero_()
        for heads, strength in ((HELPERS, 3.0), (SUPPRESSORS, -6.0)):
            for layer, head in heads:
                o_proj = model.model.layers[layer].self_attn.o_proj.weight
                o_proj[1, head * D_HEAD : (head + 1) * D_HEAD] = strength / D_HEAD
    model.save_pretrained(path)
    return path


def planted_mask() -> torch.Tensor:
    mask = torch.ones(N_LAYERS, N_HEADS)
    for layer, head in SUPPRESSORS:
        mask[layer, head] = 0.0
    return mask


def planted_task(n: int = 120, seed: int = 0) -> Task:
    rng = random.Random(seed)
    pairs = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(n)]
    return Task.from_pairs("planted", [(x, "X") for x in pairs], instruction="Say X: {input}", n_eval=20)
