"""Baked GGUF files in llama.cpp (llama-cpp-python, `pip install 'headsup_lens[gguf]'`): slow checks.

llama.cpp computes its own way (F32 matmuls in other orders; Q4_1 weights multiplied with
activations quantised to 8 bits), so its logits are compared with the toolkit's against the same
comparison for the unbaked file (the control): the bake may add no error of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from headsup_lens import HeadMask, bake, fingerprint, load_model
from headsup_lens.gates import value_gate
from headsup_lens.models import _gguf

from ..conftest import random_mask
from ..models.conftest import bpe_tokenizer, random_llama, write_llama_gguf

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (pip install 'headsup_lens[gguf]'; it builds from source)"
)
pytestmark = pytest.mark.slow

SMOLLM2_MASK = Path(__file__).resolve().parents[2] / "figures" / "smollm2" / "masks" / "antonym.safetensors"


def llama_cpp_logits(path: Path, tokens: list[int]) -> torch.Tensor:
    """Next-token logits at every position, `[pos, d_vocab]`, from llama.cpp."""
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, logits_all=True, n_threads=1, verbose=False)
    llm.eval(tokens)
    return torch.tensor(np.array(llm.scores[: len(tokens)]))


def llama_cpp_greedy(path: Path, prompts: list[list[int]], max_new_tokens: int, stops: set[int]) -> list[list[int]]:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=1, logits_all=True, verbose=False)
    outputs = []
    for prompt in prompts:
        llm.reset()
        llm.eval(prompt)
        new: list[int] = []
        while len(new) < max_new_tokens:
            token = int(llm.scores[llm.n_tokens - 1].argmax())
            if token in stops:
                break
            new.append(token)
            llm.eval([token])
        outputs.append(new)
    return outputs


@pytest.mark.parametrize("quantise", [{}, {"attn_output": "Q4_1", "ffn_down": "Q4_1"}], ids=["f32", "q4_1"])
def test_llama_cpp_runs_the_baked_gguf_as_the_gated_model(quantise, tmp_path, monkeypatch):
    monkeypatch.setenv(_gguf.CACHE_ENV_VAR, str(tmp_path / "cache"))
    tokenizer = bpe_tokenizer()
    weights = random_llama(tokenizer, tie=False, hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
    source = write_llama_gguf(weights, tokenizer, tmp_path / "source.gguf", quantise=quantise)
    model = load_model(source, device="cpu", dtype="float32")
    values = random_mask(model, seed=3)
    values[0, 0] = 0.0
    mask = HeadMask(values, model=fingerprint(model), mlp_values=torch.tensor([0.0, 1.0]))
    baked = bake(model, mask, tmp_path / "baked", format="gguf")

    tokens = torch.randint(3, model.cfg.d_vocab, (12,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        ungated = model(torch.tensor([tokens]))[0]
        with value_gate(model, mask):
            gated = model(torch.tensor([tokens]))[0]
    error = (llama_cpp_logits(baked, tokens) - gated).abs().max().item()
    control = (llama_cpp_logits(source, tokens) - ungated).abs().max().item()
    effect = (gated - ungated).abs().max().item()
    assert error <= max(2 * control, 1e-3), (error, control)
    assert error < 0.05 * effect, (error, effect)


@pytest.mark.timeout(3600)
def test_smollm2_baked_gguf_in_llama_cpp_agrees_with_the_gated_model(tmp_path):
    """The committed antonym mask baked into SmolLM2's Q4_1 file: llama.cpp's greedy outputs on the
    first 30 held-out antonym inputs against the gated toolkit model, and as the control the
    unbaked file against the ungated model. Quantised arithmetic may flip near-ties, so the bake
    must agree at least nearly as often as the control does (and change what llama.cpp answers)."""
    from headsup_lens.data import encode_prompt, load_task, task_prompts
    from headsup_lens.evaluation import generate_answers
    from headsup_lens.models import gguf_file, gguf_source_of, stop_token_ids

    entry = _gguf.cached_model_dir("smollm2")
    if entry is None or gguf_source_of(entry) is None:
        pytest.skip("smollm2 is not in the model cache with its GGUF source (headsup fetch-model smollm2)")
    if not os.environ.get("HEADSUP_DATA_DIR"):
        pytest.skip("the antonym task needs HEADSUP_DATA_DIR")
    model = load_model("smollm2", device="cpu", dtype="float32")
    mask = HeadMask.load(SMOLLM2_MASK, model)
    baked = bake(model, mask, tmp_path / "baked", format="gguf")
    task = load_task("antonym")
    inputs, shots, _ = task_prompts(task, "eval")
    prompts = [encode_prompt(model, x, s) for x, s in zip(inputs[:30], shots[:30])]
    stops = set(stop_token_ids(model))

    def decode(outputs: list[list[int]]) -> list[str]:
        return [model.tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]

    gated = generate_answers(model, prompts, mask=mask, max_new_tokens=task.max_new_tokens)
    ungated = generate_answers(model, prompts, max_new_tokens=task.max_new_tokens)
    with gguf_file(*gguf_source_of(entry)) as source:
        unbaked = decode(llama_cpp_greedy(source, prompts, task.max_new_tokens, stops))
    from_baked = decode(llama_cpp_greedy(baked, prompts, task.max_new_tokens, stops))
    agree = sum(a == b for a, b in zip(from_baked, gated)) / len(prompts)
    control = sum(a == b for a, b in zip(unbaked, ungated)) / len(prompts)
    print(f"llama.cpp vs toolkit, 30 antonym inputs: baked vs gated {agree:.2f}, unbaked vs ungated {control:.2f}")
    assert agree >= control - 0.1, (agree, control)
    assert sum(a != b for a, b in zip(from_baked, unbaked)) >= 5  # the mask changes llama.cpp's answers
