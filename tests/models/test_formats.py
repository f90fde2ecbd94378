"""Prompt formats: the paper's per-family formats, detected from tokenizers built offline in each
family's style, rendered character for character; the tokenizer's own template as an option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens.models import (
    PAPER_FORMATS,
    detect_family,
    format_for,
    prompt_format,
    set_prompt_format,
    tokenizer_format,
)

from ..conftest import subword_tokenizer

# The reference code's templates (its train_mask.py), with the input and answer stripped.
REFERENCE = {
    "llama3": (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{x}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "{y}<|eot_id|>",
    ),
    "chatml": ("<|im_start|>user\n{x}<|im_end|>\n<|im_start|>assistant\n", "{y}<|im_end|>"),
    "mistral": ("<s>[INST] {x}[/INST]", " {y}</s>"),
    "phi3": ("<|user|>\n{x}<|end|>\n<|assistant|>\n", "{y}<|end|>"),
    "gemma2": ("<bos><start_of_turn>user\n{x}<end_of_turn>\n<start_of_turn>model\n", "{y}<end_of_turn>"),
}


@pytest.mark.parametrize("kind", ["sentencepiece", "bytelevel"])
@pytest.mark.parametrize("family", sorted(REFERENCE))
def test_paper_format_is_detected_and_renders_the_reference_text(family, kind):
    tokenizer = subword_tokenizer(family, kind)
    assert detect_family(tokenizer) == family
    fmt = format_for(tokenizer)
    prompt, answer = REFERENCE[family]
    assert fmt.format("  the girl \n") == prompt.format(x="the girl")
    assert fmt.answer(" boy ") == answer.format(y="boy")
    # Special tokens written as text become single special ids (no BOS is added on top).
    ids = tokenizer(fmt.format("hello"), add_special_tokens=False)["input_ids"]
    opening = max((t for t in tokenizer.all_special_tokens if prompt.startswith(t)), key=len)
    assert ids[0] == tokenizer.convert_tokens_to_ids(opening)
    assert not fmt.add_bos


def test_paper_format_has_no_system_block_while_the_tokenizer_template_does(qwen2):
    tokenizer = qwen2.tokenizer  # ChatML whose template injects a default system prompt (as Qwen2.5's)
    paper = format_for(tokenizer)
    native = tokenizer_format(tokenizer)
    assert "system" not in paper.format("hi")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert native.format("hi") == rendered and "You are a helpful AI assistant." in rendered
    own = tokenizer_format(tokenizer, system="Be brief.")
    assert own.format("hi").startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    # Multi-turn rendering equals the template's own multi-turn text.
    shots = (("a", "A"), ("b", "B"))
    messages = [m for x, y in shots for m in ({"role": "user", "content": x}, {"role": "assistant", "content": y})]
    expected = tokenizer.apply_chat_template(
        [*messages, {"role": "user", "content": "c"}], add_generation_prompt=True, tokenize=False
    )
    assert native.render("c", shots) == expected
    assert paper.render("c", shots) == (
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
        "<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n"
    )
    # The choice is made once per model and used everywhere after.
    try:
        assert set_prompt_format(qwen2, "chat_template") == native and prompt_format(qwen2) == native
    finally:
        assert set_prompt_format(qwen2, "paper") == paper and prompt_format(qwen2) == paper
    with pytest.raises(ValueError, match="prompt style must be one of"):
        set_prompt_format(qwen2, "llama")
    with pytest.raises(ValueError, match="system= applies to the 'chat_template' style"):
        set_prompt_format(qwen2, "paper", system="x")


def test_llama3_date_block_is_dropped_and_multi_turn_matches_the_paper_files():
    tokenizer = subword_tokenizer("llama3", "bytelevel")
    assert "Cutting Knowledge" in tokenizer_format(tokenizer).format("x")
    assert "Cutting Knowledge" not in format_for(tokenizer).format("x")
    # The paper's few-shot files store demonstrations as Llama-3 turns inside the user text.
    text = (
        "a<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nc"
    )
    assert format_for(tokenizer).render("c", (("a", "A"),)) == PAPER_FORMATS["llama3"].format(text)


def test_base_models_get_the_plain_format(gpt2):
    fmt = prompt_format(gpt2)
    assert fmt.name == "plain" and fmt.format(" x ") == "x\n\n" and fmt.answer("y") == "y" + gpt2.tokenizer.eos_token


def test_unknown_template_family_renders_the_tokenizer_template(llama):
    fmt = prompt_format(llama)  # the character tokenizer's `<user> x <assistant> ` template
    assert fmt.name == "chat_template" and fmt.format("ab") == "<user> ab <assistant> "
    assert fmt.end_of_turn == "<eos>"


@given(cut=st.integers(min_value=0, max_value=10_000))
def test_a_safetensors_file_cut_anywhere_is_named_as_truncated(cut):
    """`_formats.safetensors_header` (the masks' reader and the sharded loader check files with it):
    every prefix of a file shorter than the whole is a ValueError naming the file, never a library error."""
    import tempfile

    import torch

    from headsup_lens._formats import safetensors_header
    from headsup_lens.masks._files import safetensors_bytes

    data = safetensors_bytes({"a": torch.ones(40, 30), "b": torch.zeros(7)}, {"k": "v"})
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        path.write_bytes(data[: cut % len(data)])
        with pytest.raises(
            ValueError, match=rf"checkpoint file '{re.escape(str(path))}' (is truncated|has a malformed)"
        ):
            safetensors_header(path, "checkpoint file")
        path.write_bytes(data)
        assert set(safetensors_header(path, "checkpoint file")) == {"a", "b", "__metadata__"}
