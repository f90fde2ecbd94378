"""`headsup bake` end to end on a tiny model: the folder it writes runs in plain transformers."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM

from headsup_lens import HeadMask, fingerprint
from headsup_lens.cli import command_line, main
from headsup_lens.gates import value_gate

from ..conftest import random_mask, random_tokens


def test_bake_command_writes_a_checkpoint_equal_to_the_gated_model(llama, llama_dir, tmp_path, capsys):
    mask = HeadMask(random_mask(llama, seed=5), model=fingerprint(llama), metadata={"task": "words"})
    mask_path = mask.save(tmp_path / "mask.safetensors")
    out = tmp_path / "baked"
    argv = ["bake", "--model", str(llama_dir), "--mask", str(mask_path), "--out", str(out), "--alpha", "0.25"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"baked {mask.n_kept}/{mask.n_total} kept heads (words, alpha 0.25)" in printed and "MiB" in printed

    plain = AutoModelForCausalLM.from_pretrained(out)
    tokens = random_tokens(llama)
    with torch.no_grad(), value_gate(llama, mask, alpha=0.25):
        reference = llama(tokens)
    with torch.no_grad():
        assert (plain(tokens).logits - reference).abs().max() <= 1e-5
    assert json.loads((out / "config.json").read_text())["headsup_lens"]["alpha"] == 0.25

    # A second bake into the same folder is refused, in one line, and leaves the folder as it was.
    files = sorted(p.name for p in out.iterdir())
    capsys.readouterr()  # transformers' loading bar above
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "exists" in err
    assert sorted(p.name for p in out.iterdir()) == files


def test_bake_command_refusals_are_one_line_and_write_nothing(llama_dir, tmp_path, capsys):
    missing = tmp_path / "no-mask.safetensors"
    assert main(["bake", "--model", str(llama_dir), "--mask", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "o").exists()
    argv = ["bake", "--mask", str(missing), "--out", str(tmp_path / "o"), "--format", "onnx"]
    assert main(argv) == 2
    assert "--format must be hf or gguf" in capsys.readouterr().err and not (tmp_path / "o").exists()
    mask = tmp_path / "mask.safetensors"
    mask.write_bytes(b"")  # never read: the option is refused first
    argv = ["bake", "--mask", str(mask), "--out", str(tmp_path / "o"), "--gguf-source", "smollm2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--gguf-source smollm2 applies only to --format gguf, not to --format hf" in err
    assert err.count("\n") == 1 and not (tmp_path / "o").exists()


def test_bake_options_are_documented():
    text = " ".join(command_line("bake").format_help().split())
    for option in ("--model", "--mask", "--out", "--alpha", "--format", "--gguf-source", "--allow-soft"):
        assert option in text, option
    assert "a Hugging Face folder for transformers" in text and "Scale of the removed heads" in text
