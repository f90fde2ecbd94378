"""Prompt formats: how a bare input `x` becomes a prompt, and what ends the assistant's turn.

One place decides the format of every prompt the project builds (training, evaluation, sweeps, lens,
similarity, attention, CLI, demo): `prompt_format(model)`. The default, `"paper"`, is the bare
per-family turn format of the paper's reference code (no system block, input and answer stripped);
`"chat_template"` renders the tokenizer's own chat template instead (with its default system
prompt, or with `system=` text), for users who want the model's native formatting.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import to_device
from .._validate import check_unicode

_ANSWER_PROBE = "\x00ANSWER\x00"  # strings no real template contains, located to split the turns
_SECOND_PROBE = "\x00SECOND\x00"
_THIRD_PROBE = "\x00THIRD\x00"
_ATTRIBUTE = "_headsup_prompt_format"  # where the chosen format is kept on the model

STYLES = ("paper", "chat_template")


@dataclass(frozen=True)
class PromptFormat:
    """A turn format: the prompt is `prefix + x + suffix`; the answer follows as
    `answer_prefix + y + end_of_turn`.

    Demonstrations (few-shot) are earlier turns: `prefix + x1 + suffix + answer_prefix + y1 +
    shot_end + next_turn + x2 + suffix + ...`. Special tokens are written as text, as the reference
    code does, so `add_bos` is true only where the format relies on the tokenizer's BOS id (the plain
    format of base models that use one). With `strip`, inputs and answers are `.strip()`-ed.
    """

    name: str
    prefix: str
    suffix: str
    end_of_turn: str
    next_turn: str = ""
    answer_prefix: str = ""
    shot_end: str | None = None
    add_bos: bool = False
    strip: bool = True

    def clean(self, text: str) -> str:
        """`text` as the format writes it (stripped when `strip`)."""
        return text.strip() if self.strip else text

    def format(self, x: str) -> str:
        """The prompt of one bare input, up to where the assistant's answer starts."""
        return f"{self.prefix}{self.clean(x)}{self.suffix}"

    def render(self, x: str, shots: tuple[tuple[str, str], ...] = ()) -> str:
        """The prompt of `x` after demonstration turns `shots` ((input, answer), ...)."""
        shot_end = self.end_of_turn if self.shot_end is None else self.shot_end
        text = self.prefix
        for shot_x, shot_y in shots:
            text += (
                f"{self.clean(shot_x)}{self.suffix}{self.answer_prefix}{self.clean(shot_y)}{shot_end}{self.next_turn}"
            )
        return f"{text}{self.clean(x)}{self.suffix}"

    def answer(self, y: str) -> str:
        """The text that follows the prompt in a training example: the answer and the end of turn."""
        return f"{self.answer_prefix}{self.clean(y)}{self.end_of_turn}"


# The reference code's templates, by model family (train_mask.py of the paper's repository).
PAPER_FORMATS: dict[str, PromptFormat] = {
    "llama3": PromptFormat(
        "llama3",
        prefix="<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n",
        suffix="<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        end_of_turn="<|eot_id|>",
        next_turn="<|start_header_id|>user<|end_header_id|>\n\n",
    ),
    "chatml": PromptFormat(
        "chatml",
        prefix="<|im_start|>user\n",
        suffix="<|im_end|>\n<|im_start|>assistant\n",
        end_of_turn="<|im_end|>",
        next_turn="\n<|im_start|>user\n",
    ),
    "mistral": PromptFormat(
        "mistral", prefix="<s>[INST] ", suffix="[/INST]", end_of_turn="</s>", next_turn="[INST] ", answer_prefix=" "
    ),
    "phi3": PromptFormat(
        "phi3", prefix="<|user|>\n", suffix="<|end|>\n<|assistant|>\n", end_of_turn="<|end|>", next_turn="\n<|user|>\n"
    ),
    "gemma2": PromptFormat(
        "gemma2",
        prefix="<bos><start_of_turn>user\n",
        suffix="<end_of_turn>\n<start_of_turn>model\n",
        end_of_turn="<end_of_turn>",
        next_turn="\n<start_of_turn>user\n",
    ),
}

# Markers of each family in a tokenizer's chat template, checked in this order.
_FAMILY_MARKERS = (
    ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("gemma2", ("<start_of_turn>", "<end_of_turn>")),
    ("phi3", ("<|user|>", "<|assistant|>", "<|end|>")),
    ("mistral", ("[INST]", "[/INST]")),
)


def detect_family(tokenizer) -> str | None:
    """The paper's family of a tokenizer's chat template ("llama3", "chatml", ...), "plain" for a
    tokenizer without one (base models), or None for a template of no known family."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return "plain"
    if isinstance(template, dict):  # tokenizers with named templates keep the main one as "default"
        template = template.get("default") or next(iter(template.values()), "")
    vocabulary = tokenizer.get_vocab()
    for family, markers in _FAMILY_MARKERS:
        if all(m in template for m in markers) and all(m in vocabulary or m.startswith("[") for m in markers):
            return family
    return None


def plain_format(tokenizer, *, prepend_bos: bool = True) -> PromptFormat:
    """The paper's format for base models: `"{x}\n\n"`, answer, then the EOS token; BOS is
    prepended when the tokenizer has one and the model uses it (`prepend_bos`)."""
    return PromptFormat(
        "plain",
        prefix="",
        suffix="\n\n",
        end_of_turn=tokenizer.eos_token or "",
        shot_end="\n\n",
        add_bos=bool(tokenizer.bos_token) and prepend_bos,
    )


def tokenizer_format(tokenizer, system: str | None = None) -> PromptFormat:
    """The tokenizer's own chat template split into a `PromptFormat` (its default system prompt
    included, unless `system` gives another one)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this model's tokenizer has no chat template; use prompt style 'paper'")
    head = [] if system is None else [{"role": "system", "content": system}]

    def apply(messages: list[dict], generation: bool) -> str:
        return tokenizer.apply_chat_template(head + messages, add_generation_prompt=generation, tokenize=False)

    one = apply([{"role": "user", "content": _ANSWER_PROBE}], True)
    turns = apply(
        [
            {"role": "user", "content": _ANSWER_PROBE},
            {"role": "assistant", "content": _SECOND_PROBE},
            {"role": "user", "content": _THIRD_PROBE},
        ],
        True,
    )
    prefix, suffix = one.split(_ANSWER_PROBE)
    between = turns.split(_SECOND_PROBE)[1].split(_THIRD_PROBE)[0]  # end of turn + next user opener
    closed = apply([{"role": "user", "content": "u"}, {"role": "assistant", "content": _SECOND_PROBE}], False)
    end_of_turn = closed.split(_SECOND_PROBE)[1].rstrip("\n") or (tokenizer.eos_token or "")
    next_turn = between[len(end_of_turn) :] if between.startswith(end_of_turn) else between
    return PromptFormat("chat_template", prefix=prefix, suffix=suffix, end_of_turn=end_of_turn, next_turn=next_turn)


def format_for(tokenizer, style: str = "paper", *, system: str | None = None, prepend_bos: bool = True) -> PromptFormat:
    """The prompt format of a tokenizer in a style (see `set_prompt_format`)."""
    if style == "paper":
        if system is not None:
            raise ValueError(
                "system= applies to the 'chat_template' style only; the paper's format has no system block"
            )
        family = detect_family(tokenizer)
        if family == "plain":
            return plain_format(tokenizer, prepend_bos=prepend_bos)
        if family is None:  # a template of no family the paper used (e.g. the organism's): render it
            return tokenizer_format(tokenizer)
        return PAPER_FORMATS[family]
    if style == "chat_template":
        return tokenizer_format(tokenizer, system)
    raise ValueError(f"prompt style must be one of {STYLES} or a PromptFormat, not {style!r}")


def set_prompt_format(
    model: TransformerBridge, style: str | PromptFormat = "paper", *, system: str | None = None
) -> PromptFormat:
    """Choose how every prompt for `model` is built from now on; returns the format.

    `"paper"` (the default): the reference code's per-family format, detected from the tokenizer
    (Llama-3, ChatML for Qwen2/SmolLM2, Mistral, Phi-3, Gemma-2; `"{x}\\n\\n"` for base models;
    the tokenizer's template for families the paper did not use). `"chat_template"`: the tokenizer's
    chat template, with its default system prompt or `system`. A `PromptFormat` is used as given.
    """
    if isinstance(style, PromptFormat):
        chosen = style
    else:
        chosen = format_for(
            model.tokenizer, style, system=system, prepend_bos=bool(getattr(model.cfg, "default_prepend_bos", True))
        )
    object.__setattr__(model, _ATTRIBUTE, chosen)  # plain attribute: not a module, parameter or buffer
    return chosen


def prompt_format(model: TransformerBridge) -> PromptFormat:
    """The format every prompt for `model` is built with (see `set_prompt_format`; default "paper")."""
    chosen = getattr(model, _ATTRIBUTE, None)
    return chosen if chosen is not None else set_prompt_format(model)


def encode(model: TransformerBridge, text: str, *, add_bos: bool) -> list[int]:
    """Token ids of `text`, with BOS prepended exactly once when `add_bos`.

    Characters the tokenizer cannot encode (they become its unknown or padding token) are a
    ValueError naming them, never a silent `<unk>`/`<pad>` in the prompt.
    """
    check_unicode("the text", text)
    tokenizer = model.tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    suspicious = {i for i in (tokenizer.unk_token_id, tokenizer.pad_token_id) if i is not None}
    if suspicious & set(ids):
        specials = sorted(tokenizer.all_special_tokens, key=len, reverse=True)
        # Special tokens written as text are meant; every other character is tried on its own,
        # whitespace included (a TAB the vocabulary lacks would otherwise become <unk>/<pad> unseen).
        plain = re.split("|".join(map(re.escape, specials)), text) if specials else [text]
        bad = sorted(
            {c for c in "".join(plain) if suspicious & set(tokenizer(c, add_special_tokens=False)["input_ids"])}
        )
        if bad:
            named = ", ".join(f"{c!r} (U+{ord(c):04X} {_character_name(c)})" for c in bad[:10])
            raise ValueError(
                f"the text {text[:80]!r} has characters this model's tokenizer cannot encode: {''.join(bad)!r}; "
                f"they would become its unknown or padding token: {named}"
            )
    if add_bos and tokenizer.bos_token_id is not None and (not ids or ids[0] != tokenizer.bos_token_id):
        ids = [tokenizer.bos_token_id, *ids]
    return list(ids)


def _character_name(char: str) -> str:
    """The Unicode name of a character; control characters have none: their usual name, or "control"."""
    return unicodedata.name(char, "") or {"\t": "TAB", "\r": "CARRIAGE RETURN", "\x0b": "VERTICAL TAB"}.get(
        char, f"control character, category {unicodedata.category(char)}"
    )


def check_context(model: TransformerBridge, n_tokens: int, what: str) -> None:
    """A sequence longer than the model's context window is an error, not a silent wrap-around."""
    limit = getattr(model.cfg, "n_ctx", None)
    if limit and n_tokens > int(limit):
        raise ValueError(f"the {what} has {n_tokens} tokens, more than the model's context of {limit}")


def encode_prompts(
    model: TransformerBridge, prompts: list[str], *, add_bos: bool | None = None
) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Left-padded token ids and attention mask for already formatted prompts (for generation)."""
    if add_bos is None:
        add_bos = prompt_format(model).add_bos
    rows = [encode(model, p, add_bos=add_bos) for p in prompts]
    return left_pad(rows, pad_id=pad_token_id(model), device=model.cfg.device)


def pad_token_id(model: TransformerBridge) -> int:
    """The token id that pads batches: the tokenizer's pad token, else its end-of-sequence token, else 0."""
    tokenizer = model.tokenizer
    return int(next(c for c in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if c is not None))


def left_pad(
    rows: list[list[int]], *, pad_id: int, device: torch.device | str | None = None
) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Left padding keeps every row's last token at position -1, which generation needs. Built on the
    host and, with `device`, copied there without waiting for the device's queued work."""
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("cannot pad an empty batch or an empty row")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        attention[i, width - len(row) :] = 1
    if device is None:
        return ids, attention
    return to_device(ids, device), to_device(attention, device)  # a GPU's queue does not drain for it


def stop_token_ids(model: TransformerBridge) -> set[int]:
    """Tokens that end a reply: the end-of-sequence id(s) and the first token of the end of turn."""
    eos = getattr(model.cfg, "eos_token_id", None)
    if eos is None:
        eos = model.tokenizer.eos_token_id
    stops = set() if eos is None else ({int(eos)} if isinstance(eos, int) else {int(e) for e in eos})
    end_of_turn = encode(model, prompt_format(model).end_of_turn, add_bos=False)
    return stops | set(end_of_turn[:1])


def cut_at_stop(rows: list[list[int]], stops: set[int]) -> list[list[int]]:
    """Each row up to (not including) its first stop token."""
    return [row[: next((i for i, t in enumerate(row) if t in stops), len(row))] for row in rows]
