"""A character-level tokenizer with chat specials, for small models built here (organism, tests)."""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

DEFAULT_ALPHABET = string.ascii_lowercase + string.ascii_uppercase + " .,:;!?'-\n"
CHAT_SPECIALS = ("<pad>", "<user>", "<assistant>", "<eos>")
# `<user> {x} <assistant> {y}<eos>`: the organism's turn format, as a Hugging Face chat template.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}<user> {{ message['content'] }} <assistant> "
    "{% else %}{{ message['content'] }}<eos>{% endif %}"
    "{% endfor %}"
)


def char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """One token per character plus `<pad> <user> <assistant> <eos>`; reloads with `AutoTokenizer`."""
    if len(set(alphabet)) != len(alphabet):
        raise ValueError("alphabet has repeated characters")
    vocab = {token: i for i, token in enumerate([*CHAT_SPECIALS, *alphabet])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        additional_special_tokens=["<user>", "<assistant>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


# Chat templates in the style of real model families, for tokenizers built here (tests, benchmarks).
# The ChatML and Llama-3 ones inject a default system block, as Qwen2.5, SmolLM2 and Llama-3.1 do.
FAMILY_TEMPLATES = {
    "chatml": (
        "{%- if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
        "{%- set loop_messages = messages[1:] %}"
        "{%- else %}{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}"
        "{%- set loop_messages = messages %}{%- endif %}"
        "{%- for message in loop_messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
    ),
    "llama3": (
        "{{- bos_token }}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
        "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
        "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- set loop_messages = messages[1:] %}"
        "{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- '<|eot_id|>' }}"
        "{%- for message in loop_messages %}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}"
        "{% endfor %}"
    ),
    "phi3": (
        "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
        "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
        "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '<|end|>\\n' }}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
    ),
    "gemma2": (
        "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
    ),
}
FAMILY_SPECIALS = {
    "chatml": {"bos": None, "eos": "<|im_end|>", "extra": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]},
    "llama3": {
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "extra": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>"],
    },
    "mistral": {"bos": "<s>", "eos": "</s>", "extra": ["<s>", "</s>"]},
    "phi3": {"bos": "<s>", "eos": "<|end|>", "extra": ["<s>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"]},
    "gemma2": {"bos": "<bos>", "eos": "<eos>", "extra": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]},
}
_CORPUS = (
    "the quick brown fox jumps over the lazy dog . a girl and a boy say hello to the world , "
    "hot cold up down big small happy sad yes no good bad day night open close left right "
    "translate into english french german chinese : output the opposite of the given word"
)


def subword_tokenizer(
    family: str = "chatml", kind: str = "sentencepiece", vocab_size: int = 300
) -> PreTrainedTokenizerFast:
    """A small trained subword tokenizer with a model family's specials and chat template.

    `kind="sentencepiece"`: BPE over "▁"-marked words (Metaspace, like Llama-2/Mistral/Gemma), so a
    word alone starts with "▁" but not after a newline; `kind="bytelevel"`: byte-level BPE (GPT-2,
    Llama-3, Qwen2, SmolLM2). Trained in-process on a fixed text: deterministic, no download.
    """

    if family not in FAMILY_TEMPLATES:
        raise ValueError(f"family must be one of {sorted(FAMILY_TEMPLATES)}, not {family!r}")
    specials = FAMILY_SPECIALS[family]
    special_tokens = ["<unk>", "<pad>", *[t for t in specials["extra"] if t not in ("<unk>", "<pad>")]]
    if kind == "sentencepiece":
        backend = Tokenizer(models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = sorted(set(string.ascii_letters + string.digits + ".,:;!?'-\n▁"))
    elif kind == "bytelevel":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        raise ValueError(f"kind must be 'sentencepiece' or 'bytelevel', not {kind!r}")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=alphabet, show_progress=False
    )
    backend.train_from_iterator([_CORPUS] * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>" if kind == "sentencepiece" else None,
        pad_token="<pad>",
        bos_token=specials["bos"],
        eos_token=specials["eos"],
        additional_special_tokens=[t for t in specials["extra"] if t not in (specials["bos"], specials["eos"])],
    )
    tokenizer.chat_template = FAMILY_TEMPLATES[family]
    return tokenizer
