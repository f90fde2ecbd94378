import pytest
import torch
from transformers import AutoModelForCausalLM

from headsup_lens import fingerprint, load_model
from headsup_lens.models import encode, encode_prompts, resolve_dtype

from ..conftest import random_tokens


def test_local_directory_loads_offline_and_matches_hugging_face(llama_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = load_model(llama_dir, device="cpu", dtype="fp32")
    reference = AutoModelForCausalLM.from_pretrained(llama_dir, attn_implementation="eager")
    tokens = random_tokens(model)
    with torch.no_grad():
        assert (model(tokens) - reference(tokens).logits).abs().max() < 1e-5
    assert not any(p.requires_grad for p in model.parameters())


def test_dtype_strings_and_torch_dtypes(gpt2_dir):
    assert next(load_model(gpt2_dir, dtype="bf16").parameters()).dtype == torch.bfloat16
    assert next(load_model(gpt2_dir, dtype=torch.float16).parameters()).dtype == torch.float16
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"))


def test_unknown_hub_model_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="not a local directory.*pass the directory"):
        load_model("no-such-org/no-such-model-xyz", device="cpu")


def test_a_local_path_without_a_model_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        load_model(tmp_path, device="cpu")
    with pytest.raises(ValueError, match="no config.json"):
        load_model(tmp_path / "missing", device="cpu")


def test_unavailable_device_is_a_clear_error(gpt2_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="CUDA is not available"):
        load_model(gpt2_dir, device="cuda")


def test_fingerprint(llama, gpt2):
    fp = fingerprint(llama)
    assert (fp.architecture, fp.n_layers, fp.n_heads, fp.d_head, fp.d_vocab) == ("LlamaForCausalLM", 2, 8, 8, 66)
    assert fingerprint(gpt2).architecture == "GPT2LMHeadModel" and fingerprint(gpt2).n_heads == 4


def test_encode_adds_bos_once_and_prompts_are_left_padded(llama):
    ids, attention = encode_prompts(llama, ["<user> a <assistant> ", "<user> abc <assistant> "])
    assert attention[0].tolist()[:2] == [0, 0] and attention[1].all()
    assert ids[0, -1] == ids[1, -1]
    tokenizer = llama.tokenizer
    tokenizer.bos_token = "<eos>"  # pretend it has one
    try:
        assert encode(llama, "<eos>a", add_bos=True).count(tokenizer.bos_token_id) == 1
        assert encode(llama, "a", add_bos=True)[0] == tokenizer.bos_token_id
    finally:
        tokenizer.bos_token = None


def test_sharded_loading_through_a_device_map(llama_dir):
    """`device_map` goes to accelerate's placement (here every module on the CPU); gates still work."""
    import torch

    from headsup_lens import value_gate

    model = load_model(llama_dir, device_map={"": "cpu"}, dtype="float32")
    reference = load_model(llama_dir, device="cpu", dtype="float32")
    tokens = torch.tensor([[5, 6, 7, 8]])
    mask = torch.ones(model.cfg.n_layers, model.cfg.n_heads)
    mask[0, :3] = 0
    with torch.no_grad(), value_gate(model, mask):
        sharded = model(tokens)
    with torch.no_grad(), value_gate(reference, mask):
        plain = reference(tokens)
    assert torch.allclose(sharded, plain, atol=1e-5)
    with pytest.raises(ValueError, match="either device or device_map"):
        load_model(llama_dir, device="cpu", device_map="auto")


@pytest.mark.parametrize("typed", ["smollm", "SmolLM2", "smolm2", "Organism", "organsim"])
def test_a_near_miss_of_a_built_in_name_names_the_model_meant_without_asking_the_hub(typed, monkeypatch):
    """Before, `load_model("SmolLM2")` went to the hub (four retries, ~37 s online) and failed without a hint."""
    import huggingface_hub

    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_hub)
    meant = "organism" if typed.lower().startswith("org") else "smollm2"
    with pytest.raises(ValueError, match=f"did you mean '{meant}'"):
        load_model(typed)


def test_hub_names_and_local_folders_are_not_taken_for_near_misses(llama_dir):
    from headsup_lens.models._loading import check_model_name

    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "gpt2", str(llama_dir), "HuggingFaceTB/SmolLM2-135M-Instruct"):
        check_model_name(name)  # no error


def test_fetch_model_of_an_unknown_name_lists_the_known_ones(tmp_path):
    from headsup_lens.models._gguf import fetch_model

    with pytest.raises(ValueError, match=r"did you mean 'smollm2'.*built-in: gemma3-270m, smollm2"):
        fetch_model("smolm2", cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written


def test_weights_are_frozen_unless_asked_otherwise(llama_dir):
    assert not any(p.requires_grad for p in load_model(llama_dir).parameters())
    assert all(p.requires_grad for p in load_model(llama_dir, freeze=False).parameters())


def test_devices_are_cpu_or_cuda_in_any_case():
    from headsup_lens.models._loading import resolve_device

    assert resolve_device("CPU") == torch.device("cpu") and resolve_device(torch.device("cpu")).type == "cpu"
    for device in ("gpu", "mps", "meta", "tpu", "cuda:first"):
        with pytest.raises(ValueError, match=r"device must be cpu, cuda or cuda:N \(N: a GPU index\)"):
            resolve_device(device)
    with pytest.raises(ValueError, match="device must be cpu, cuda or cuda:N"):
        resolve_device(torch.device("meta"))
