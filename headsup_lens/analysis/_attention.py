"""Attention on target (Table 7): for "pick one of three words" tasks, how much the last input token
attends to the target word, normalised over the three candidate words, per head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..gates import MaskLike
from ..gates._masks import mask_tensor
from ..models import chat_template, left_pad, pad_token_id
from ._common import Gate, gated

Pair = tuple[str, str]
SETTINGS = ("original", "instructed", "masked")


@dataclass
class AttentionOnTarget:
    """`per_head[setting]`: `[n_layers, n_heads]` mean share of the last token's attention (over the
    three candidate words) that goes to the target word. `table`: per setting, the mean over heads
    inside the mask, outside it, and over all heads."""

    per_head: dict[str, Float[Tensor, "n_layers n_heads"]]
    table: pd.DataFrame
    n_examples: int


@dataclass(frozen=True)
class WordExample:
    """One prompt with the token positions of its candidate words and the index of the target."""

    ids: list[int]
    word_tokens: list[list[int]]
    target: int


def candidate_spans(x: str, answer: str, n_words: int = 3) -> tuple[list[tuple[int, int]], int]:
    """Character spans of the comma-separated candidate words in `x` and which one is `answer`."""
    spans, cursor = [], 0
    for part in x.split(","):
        word = part.strip()
        start = x.index(word, cursor)
        spans.append((start, start + len(word)))
        cursor = start + len(word)
    if len(spans) != n_words or any(s == e for s, e in spans):
        raise ValueError(f"input {x!r} is not {n_words} comma-separated words")
    words = [x[s:e] for s, e in spans]
    matches = [i for i, w in enumerate(words) if w.strip().lower() == answer.strip().lower()]
    if len(matches) != 1:
        raise ValueError(f"answer {answer!r} is not exactly one of the candidate words {words}")
    return spans, matches[0]


def word_example(model: TransformerBridge, user_text: str, x: str, answer: str) -> WordExample:
    """Tokenise the chat-formatted prompt and map each candidate word to the tokens overlapping it
    (through the tokenizer's character offsets, so any tokenizer works)."""
    if not getattr(model.tokenizer, "is_fast", False):
        raise ValueError("attention_on_target needs a fast tokenizer (character offsets); load the model's fast tokenizer")
    template = chat_template(model)
    where = user_text.find(x)
    if where < 0:
        raise ValueError(f"the input {x!r} does not occur in the user text {user_text!r}")
    text = template.format(user_text)
    offset = len(template.prefix) + where
    spans, target = candidate_spans(x, answer)
    encoded = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoded["input_ids"]), list(encoded["offset_mapping"])
    bos = model.tokenizer.bos_token_id
    if template.add_bos and bos is not None and (not ids or ids[0] != bos):
        ids, offsets = [bos, *ids], [(0, 0), *offsets]
    word_tokens = []
    for start, end in spans:
        start, end = start + offset, end + offset
        tokens = [i for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]
        if not tokens:
            raise ValueError(f"no token covers the word {text[start:end]!r} in {text!r}")
        word_tokens.append(tokens)
    return WordExample(ids=ids, word_tokens=word_tokens, target=target)


def target_share(
    patterns: Sequence[Float[Tensor, "batch n_heads query key"]], examples: Sequence[WordExample], pad: Sequence[int]
) -> Float[Tensor, "batch n_layers n_heads"]:
    """Per example, layer and head: attention of the last position to the target word's tokens
    divided by its attention to all three candidate words' tokens."""
    shares = []
    for row, (example, shift) in enumerate(zip(examples, pad)):
        last = torch.stack([p[row, :, -1].float() for p in patterns])  # [n_layers, n_heads, key]
        per_word = torch.stack([last[..., [t + shift for t in tokens]].sum(-1) for tokens in example.word_tokens], -1)
        shares.append(per_word[..., example.target] / per_word.sum(-1).clamp_min(1e-30))
    return torch.stack(shares)


def attention_on_target(
    model: TransformerBridge,
    examples,
    mask: MaskLike,
    *,
    instruction: str | None = None,
    settings: Sequence[str] = SETTINGS,
    gate: Gate = "value",
    batch_size: int = 16,
) -> AttentionOnTarget:
    """Table 7: attention of the last input token to the target word, per head and setting.

    `examples` is a `Task` (its `pairs`, instructed through `task.user_text`) or a list of
    `(input, output)` pairs with `input` = three comma-separated words and `output` one of them
    (then `instruction`, a template with `{input}`, gives the instructed prompt). Settings:
    `"original"` (no instruction, no mask), `"instructed"`, `"masked"` (no instruction, `mask` under
    `gate`), `"masked+instructed"`. Heads "inside" the mask are those with value > 0.
    """
    if hasattr(examples, "pairs") and hasattr(examples, "user_text"):
        pairs, user_text = list(examples.pairs), examples.user_text
    else:
        pairs = [tuple(p) for p in examples]
        if instruction is not None and "{input}" not in instruction:
            raise ValueError(f"instruction template {instruction!r} lacks '{{input}}'")

        def user_text(x: str, instructed: bool = False) -> str:
            if not instructed:
                return x
            if instruction is None:
                raise ValueError("the instructed setting needs an instruction template")
            return instruction.replace("{input}", x)

    if not pairs:
        raise ValueError("no examples given")
    known = ("original", "instructed", "masked", "masked+instructed")
    if not settings or any(s not in known for s in settings):
        raise ValueError(f"settings must be drawn from {known}, got {list(settings)}")
    inside = mask_tensor(model, mask)
    if inside.shape[0] != 1:
        raise ValueError("attention_on_target takes one [n_layers, n_heads] mask")
    inside = inside[0].detach().cpu() > 0
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    per_head, rows = {}, []
    for setting in settings:
        instructed = "instructed" in setting
        setting_mask = mask if setting.startswith("masked") else None
        prepared = [word_example(model, user_text(x, instructed), x, y) for x, y in pairs]
        shares = []
        for start in range(0, len(prepared), batch_size):
            chunk = prepared[start : start + batch_size]
            ids, attention = left_pad([e.ids for e in chunk], pad_id=pad_token_id(model), device=model.cfg.device)
            pad = [ids.shape[1] - len(e.ids) for e in chunk]
            with torch.no_grad(), gated(model, setting_mask, gate=gate):
                _, cache = model.run_with_cache(ids, attention_mask=attention, names_filter=lambda n: n in names)
            shares.append(target_share([cache[n] for n in names], chunk, pad).cpu())
        mean = torch.cat(shares).mean(0)
        per_head[setting] = mean
        rows.append({
            "setting": setting,
            "inside": float(mean[inside].mean()) if inside.any() else float("nan"),
            "outside": float(mean[~inside].mean()) if (~inside).any() else float("nan"),
            "all": float(mean.mean()),
            "n_inside": int(inside.sum()),
        })
    return AttentionOnTarget(per_head=per_head, table=pd.DataFrame(rows), n_examples=len(pairs))
