"""Model identity by content: same weights through any path are one model; other weights are not."""

import shutil
import time

import pytest
import torch

from headsup_lens import HeadMask, fingerprint, load_model
from headsup_lens.models import ModelFingerprint
from headsup_lens.models._fingerprint import display_name, portable_name, weights_hash

from ..conftest import build_llama_dir


@pytest.fixture(scope="module")
def copy_of_llama(llama_dir, tmp_path_factory):
    copy = shutil.copytree(llama_dir, tmp_path_factory.mktemp("elsewhere") / "renamed-copy")
    return load_model(copy, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def other_llama(tmp_path_factory):
    return load_model(build_llama_dir(tmp_path_factory.mktemp("other"), seed=1), device="cpu", dtype="float32")


def test_same_weights_through_another_path_are_accepted(llama, copy_of_llama, tmp_path):
    a, b = fingerprint(llama), fingerprint(copy_of_llama)
    assert a.name != b.name and b.name == "renamed-copy"  # names are informational, base names only
    assert a.content_hash == b.content_hash and a.content_hash.startswith("sha256:")
    path = HeadMask.full(llama).save(tmp_path / "m.safetensors")
    assert HeadMask.load(path, copy_of_llama).n_kept == llama.cfg.n_layers * llama.cfg.n_heads


def test_other_weights_of_the_same_shape_are_refused_unless_allowed(llama, other_llama, tmp_path):
    assert fingerprint(llama).structural() == fingerprint(other_llama).structural()
    assert fingerprint(llama).content_hash != fingerprint(other_llama).content_hash
    path = HeadMask.full(llama).save(tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match="made for other weights"):
        HeadMask.load(path, other_llama)
    mask = HeadMask.load(path, other_llama, allow_other_weights=True)  # the paper's "mask of another model"
    mask.check_model(other_llama, allow_other_weights=True)
    with pytest.raises(ValueError, match="allow_other_weights=True"):
        mask.check_model(other_llama)


def test_the_hash_follows_the_weights_and_ignores_dtype(llama_dir):
    model = load_model(llama_dir, device="cpu", dtype="float32")
    before = weights_hash(model)
    assert load_model(llama_dir, device="cpu", dtype="bfloat16") is not model
    assert weights_hash(load_model(llama_dir, device="cpu", dtype="bfloat16")) == before
    with torch.no_grad():
        next(model.original_model.parameters()).mul_(1.5)  # an in-place edit invalidates the cache
    assert weights_hash(model) != before


def test_structure_only_fingerprints_and_old_records():
    fp = ModelFingerprint.from_dict(dict(architecture="A", n_layers=2, n_heads=4, d_head=8, d_vocab=66, name="old"))
    assert fp.content_hash is None and fp.same_weights(fp) is None
    with pytest.raises(ValueError, match="missing fields"):
        ModelFingerprint.from_dict({"name": "x"})


def test_names_never_hold_absolute_paths(tmp_path):
    assert display_name(str(tmp_path / "my-model")) == "my-model"
    assert display_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert portable_name("/home/someone/models/llama") == "llama" and portable_name("org/name") == "org/name"
    assert fingerprint(load_model("organism", device="cpu")).name == "organism"


def test_hash_cost_on_a_135m_parameter_shape():
    """Computed, not asserted: the hash reads a fixed sample per tensor, whatever the tensor's size."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device="cpu")
    for parameter in model.parameters():
        parameter.data.zero_()
    weights_hash(model)  # first call pays one-off set-up
    start = time.perf_counter()
    digest = weights_hash(model.float())
    seconds = time.perf_counter() - start
    print(f"weights_hash on {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters: {seconds * 1e3:.1f} ms")
    assert digest.startswith("sha256:")


def test_fp32_bf16_and_fp16_loads_of_one_checkpoint_have_one_fingerprint(llama_dir, tmp_path):
    loads = {dtype: load_model(llama_dir, device="cpu", dtype=dtype) for dtype in ("fp32", "bf16", "fp16")}
    half = loads["fp16"]
    assert next(half.original_model.parameters()).dtype == torch.float16
    prints = {dtype: fingerprint(model) for dtype, model in loads.items()}
    assert prints["fp32"] == prints["bf16"] == prints["fp16"]
    # the reason the fp16 load needs its checkpoint: its own rounding hashes as other weights
    assert weights_hash(half.original_model) != prints["fp32"].content_hash
    path = HeadMask.full(loads["fp32"]).save(tmp_path / "m.safetensors")
    assert HeadMask.load(path, half).n_kept == half.cfg.n_layers * half.cfg.n_heads
    with torch.no_grad():
        next(half.original_model.parameters()).mul_(1.5)  # an edit of the fp16 weights is other weights
    assert fingerprint(half).content_hash != prints["fp32"].content_hash


def test_a_model_cast_to_fp16_by_hand_is_refused_with_the_way_to_load_it(llama_dir, tmp_path):
    model = load_model(llama_dir, device="cpu", dtype="fp32")
    path = HeadMask.full(model).save(tmp_path / "m.safetensors")
    model.to(torch.float16, print_details=False)
    with pytest.raises(ValueError, match=r"other weights.*float16.*load_model\(\.\.\., dtype='fp16'\)"):
        HeadMask.load(path, model)


def test_the_hash_copies_its_samples_to_the_host_once_per_device(llama_dir, monkeypatch):
    """Every parameter's sample is gathered on its device and copied back in one go (on a GPU each
    copy waits for the device); the hash is the one of a copy per parameter."""
    import hashlib
    import json

    import headsup_lens.models._fingerprint as fp

    model = load_model(str(llama_dir), dtype="float32")
    parameters = list(model.original_model.parameters())
    copies = []
    original = torch.Tensor.cpu

    def counted(self, *args, **kwargs):
        copies.append(self.numel())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", counted)
    fp._CACHE.clear()
    value = weights_hash(model)
    monkeypatch.undo()
    assert len(copies) == 1 and copies[0] > 1
    digest = hashlib.sha256()  # the same digest, one host copy per parameter
    digest.update(fp._HASH_SCHEME.encode())
    config = {k: fp._jsonable(getattr(model.cfg, k, None)) for k in fp._CONFIG_KEYS}
    config["architecture"] = fp._architecture(model)
    digest.update(json.dumps(config, sort_keys=True).encode())
    for parameter in parameters:
        digest.update(json.dumps(list(parameter.shape)).encode())
        digest.update(fp._sample(parameter).cpu().numpy().tobytes())
    assert value == "sha256:" + digest.hexdigest()
