"""Chat templates: how a bare input `x` becomes a prompt, and what ends the assistant's turn."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

_ANSWER_PROBE = "\x00ANSWER\x00"  # a string no real template contains, located to split the turn


@dataclass(frozen=True)
class ChatTemplate:
    """`prefix + x + suffix` is the prompt; `end_of_turn` follows the answer in training data.

    Built from the tokenizer's own chat template when it has one; base models get the paper's
    plain template `"{x}\\n\\n"` with the EOS token ending the turn.
    """

    prefix: str
    suffix: str
    end_of_turn: str
    add_bos: bool

    def format(self, x: str) -> str:
        return f"{self.prefix}{x}{self.suffix}"


def chat_template(model: TransformerBridge) -> ChatTemplate:
    """The model's chat template (see `ChatTemplate`)."""
    tokenizer = model.tokenizer
    bos = tokenizer.bos_token or ""
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": _ANSWER_PROBE}], add_generation_prompt=True, tokenize=False
        )
        turn = tokenizer.apply_chat_template(
            [{"role": "user", "content": "u"}, {"role": "assistant", "content": _ANSWER_PROBE}],
            tokenize=False,
        )
        prefix, suffix = prompt.split(_ANSWER_PROBE)
        end_of_turn = turn.split(_ANSWER_PROBE)[1].rstrip("\n") or (tokenizer.eos_token or "")
        # The template writes BOS itself; tokenising must not add a second one.
        return ChatTemplate(prefix=prefix, suffix=suffix, end_of_turn=end_of_turn, add_bos=False)
    add_bos = bool(bos) and bool(getattr(model.cfg, "default_prepend_bos", True))
    return ChatTemplate(prefix="", suffix="\n\n", end_of_turn=tokenizer.eos_token or "", add_bos=add_bos)


def encode(model: TransformerBridge, text: str, *, add_bos: bool) -> list[int]:
    """Token ids of `text`, with BOS prepended exactly once when `add_bos`."""
    tokenizer = model.tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if add_bos and tokenizer.bos_token_id is not None and (not ids or ids[0] != tokenizer.bos_token_id):
        ids = [tokenizer.bos_token_id, *ids]
    return list(ids)


def encode_prompts(
    model: TransformerBridge, prompts: list[str], *, add_bos: bool | None = None
) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Left-padded token ids and attention mask for already formatted prompts (for generation)."""
    if add_bos is None:
        add_bos = chat_template(model).add_bos
    rows = [encode(model, p, add_bos=add_bos) for p in prompts]
    return left_pad(rows, pad_id=pad_token_id(model), device=model.cfg.device)


def pad_token_id(model: TransformerBridge) -> int:
    tokenizer = model.tokenizer
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


def left_pad(
    rows: list[list[int]], *, pad_id: int, device: torch.device | str | None = None
) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Left padding keeps every row's last token at position -1, which generation needs."""
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("cannot pad an empty batch or an empty row")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        attention[i, width - len(row):] = 1
    return ids.to(device), attention.to(device)


def stop_token_ids(model: TransformerBridge) -> set[int]:
    """Tokens that end a reply: the end-of-sequence id(s) and the first token of the end of turn."""
    eos = getattr(model.cfg, "eos_token_id", None)
    if eos is None:
        eos = model.tokenizer.eos_token_id
    stops = set() if eos is None else ({int(eos)} if isinstance(eos, int) else {int(e) for e in eos})
    end_of_turn = encode(model, chat_template(model).end_of_turn, add_bos=False)
    return stops | set(end_of_turn[:1])


def cut_at_stop(rows: list[list[int]], stops: set[int]) -> list[list[int]]:
    """Each row up to (not including) its first stop token."""
    return [row[: next((i for i, t in enumerate(row) if t in stops), len(row))] for row in rows]
