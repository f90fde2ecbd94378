"""A character-level tokenizer with chat specials, for small models built here (organism, tests)."""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
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
