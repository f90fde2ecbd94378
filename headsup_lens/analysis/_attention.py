"""Attention on target (Table 7): for "pick one of three words" tasks, how much the last prompt token
attends to the target word, normalised over the three candidate words.

As in the paper, a group of heads (inside the mask, outside it, all) is summarised by summing its
attention over heads and layers first and normalising over the three words after (a ratio of
means), then averaging over examples. `per_head` keeps every head's own normalised share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..gates import MaskLike
from ..gates._masks import mask_tensor
from ..models import left_pad, pad_token_id, prompt_format
from ..models._sharding import every_rank
from ._common import Gate, check_gate_has_mask, gated, prompt_ids
from ._config import AttentionConfig, configured

Pair = tuple[str, str]
SETTINGS = AttentionConfig().settings


@dataclass
class AttentionOnTarget:
    """`per_head[setting]`: `[n_layers, n_heads]` mean share of the last token's attention (over the
    three candidate words) that goes to the target word, per head. `table`: per setting, the share
    of the attention of the heads inside the mask, outside it, and of all heads (each group's
    attention summed over its heads before normalising: the paper's Table 7), mean over examples."""

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


def choice_instruction(task_name: str) -> str | None:
    """The paper's instructed prompt for a "pick one of three" task (Table 7), e.g. `fruit_v_animal_3`
    -> `"{input}\n\nChoose the fruit out of animals:"`; None for other task names."""
    match = re.fullmatch(r"(.+)_v_(.+)_3", task_name.rsplit("/", 1)[-1])
    if match is None:
        return None
    return f"{{input}}\n\nChoose the {match.group(1)} out of {match.group(2)}s:"


def word_example(model: TransformerBridge, user_text: str, x: str, answer: str) -> WordExample:
    """Tokenise the formatted prompt and map each candidate word to the tokens overlapping it
    (through the tokenizer's character offsets, so any tokenizer works)."""
    if not getattr(model.tokenizer, "is_fast", False):
        raise ValueError(
            "attention_on_target needs a fast tokenizer (character offsets); load the model's fast tokenizer"
        )
    template = prompt_format(model)
    text = template.format(user_text)
    x = x.strip()
    where = text.find(x, len(template.prefix))
    if where < 0:
        raise ValueError(f"the input {x!r} does not occur in the prompt {text!r}")
    spans, target = candidate_spans(x, answer)
    encoded = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoded["input_ids"]), list(encoded["offset_mapping"])
    bos = model.tokenizer.bos_token_id
    if template.add_bos and bos is not None and (not ids or ids[0] != bos):
        ids, offsets = [bos, *ids], [(0, 0), *offsets]
    word_tokens = []
    for start, end in spans:
        start, end = start + where, end + where
        tokens = [i for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]
        if not tokens:
            raise ValueError(f"no token covers the word {text[start:end]!r} in {text!r}")
        word_tokens.append(tokens)
    return WordExample(ids=ids, word_tokens=word_tokens, target=target)


def word_attention(
    patterns: Sequence[Float[Tensor, "batch n_heads query key"]], examples: Sequence[WordExample], pad: Sequence[int]
) -> Float[Tensor, "batch n_layers n_heads 3"]:
    """Per example, layer and head: attention of the last position to each candidate word's tokens."""
    rows = []
    for row, (example, shift) in enumerate(zip(examples, pad)):
        last = torch.stack([p[row, :, -1].float() for p in patterns])  # [n_layers, n_heads, key]
        rows.append(torch.stack([last[..., [t + shift for t in tokens]].sum(-1) for tokens in example.word_tokens], -1))
    return torch.stack(rows)


def target_ratio(
    per_word: Float[Tensor, "batch n_layers n_heads 3"], targets: Tensor, heads: Tensor | None = None
) -> Float[Tensor, " batch"]:
    """Per example: the target word's share of the attention of `heads` (boolean `[n_layers,
    n_heads]`; default all), summed over those heads before normalising over the three words."""
    selected = per_word.flatten(1, 2) if heads is None else per_word[:, heads.to(per_word.device)]
    summed = selected.sum(1)  # [batch, 3]
    return summed.gather(1, targets[:, None].to(summed.device))[:, 0] / summed.sum(-1).clamp_min(1e-30)


@every_rank
def attention_on_target(
    model: TransformerBridge,
    examples,
    mask: MaskLike,
    config: AttentionConfig | None = None,
    **options: Any,
) -> AttentionOnTarget:
    """Table 7: attention of the last prompt token to the target word, per head and setting.

    `examples` is a `Task` or a list of `(input, output)` pairs with `input` = three comma-separated
    words and `output` one of them. The instructed prompt is `instruction` (a template with
    `{input}`); by default, for a task named `X_v_Y_3`, the paper's Table 7 prompt
    (`choice_instruction`), else the task's instruction. Settings: `"original"` (no instruction,
    no mask), `"instructed"`, `"masked"` (no instruction, `mask` under `gate`),
    `"masked+instructed"`. A `Task` contributes its `split` pairs: the held-out ones by default (the
    paper's 100), `"train"` or `"all"` otherwise. Heads "inside" the mask are those with value > 0. The paper's columns
    are: instructed = the `instructed` row's `all`; used / unused = the `masked` row's `inside` /
    `outside`. `config` (an `AttentionConfig`) holds the instruction, settings, gate, split and
    batch size; its fields may be given as keyword arguments instead (`settings=("original", "masked")`).
    """
    config = configured(AttentionConfig, config, options, "attention_on_target")
    instruction, settings, gate, split, batch_size = (
        config.instruction,
        config.settings,
        config.gate,
        config.split,
        config.batch_size,
    )
    if hasattr(examples, "pairs") and hasattr(examples, "user_text"):
        instruction = instruction or choice_instruction(examples.name) or examples.instruction
        pairs = [examples.pairs[i] for i in examples.split_indices(split)]
    else:
        pairs = [tuple(p) for p in examples]
    if instruction is not None and "{input}" not in instruction:  # the task's own template
        raise ValueError(f"instruction template {instruction!r} lacks '{{input}}'")
    if not pairs:
        raise ValueError("no examples given")
    if instruction is None and any("instructed" in s for s in settings):
        raise ValueError("the instructed settings need an instruction template (instruction=...)")
    inside = mask_tensor(model, mask)
    if inside.shape[0] != 1:
        raise ValueError("attention_on_target takes one [n_layers, n_heads] mask")
    inside = inside[0].detach().cpu() > 0
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    per_head, rows = {}, []
    template = instruction or "{input}"  # the uninstructed settings use the input as it is
    for setting in settings:
        instructed = "instructed" in setting
        setting_mask = mask if setting.startswith("masked") else None
        prepared = [word_example(model, template.replace("{input}", x) if instructed else x, x, y) for x, y in pairs]
        chunks = []
        for start in range(0, len(prepared), batch_size):
            chunk = prepared[start : start + batch_size]
            ids, attention = left_pad([e.ids for e in chunk], pad_id=pad_token_id(model), device=model.cfg.device)
            pad = [ids.shape[1] - len(e.ids) for e in chunk]
            with torch.no_grad(), gated(model, setting_mask, gate=gate):
                _, cache = model.run_with_cache(ids, attention_mask=attention, names_filter=lambda n: n in names)
            chunks.append(word_attention([cache[n] for n in names], chunk, pad).cpu())
        words = torch.cat(chunks)  # [examples, n_layers, n_heads, 3]
        targets = torch.tensor([e.target for e in prepared])
        target_words = words.gather(-1, targets.view(-1, 1, 1, 1).expand(*words.shape[:-1], 1))[..., 0]
        per_head[setting] = (target_words / words.sum(-1).clamp_min(1e-30)).mean(0)
        rows.append(
            {
                "setting": setting,
                "inside": float(target_ratio(words, targets, inside).mean()) if inside.any() else float("nan"),
                "outside": float(target_ratio(words, targets, ~inside).mean()) if (~inside).any() else float("nan"),
                "all": float(target_ratio(words, targets).mean()),
                "n_inside": int(inside.sum()),
            }
        )
    return AttentionOnTarget(per_head=per_head, table=pd.DataFrame(rows), n_examples=len(pairs))


@every_rank
def last_position_attention(
    model: TransformerBridge,
    prompt: str,
    mask: MaskLike | None = None,
    *,
    gate: Gate = "value",
    alpha: float = 0.0,
    formatted: bool = False,
) -> Float[Tensor, "n_layers n_heads pos"]:
    """Every head's attention from the last prompt position to each prompt position
    (`blocks.L.attn.hook_pattern`, float32 on the CPU), under an optional gate.

    `prompt` is the user text in the model's prompt format unless `formatted`. Under the value
    gate a head's own pattern is that of the gated model upstream of it (a removed head still
    attends; what it writes is gated); under the query gate a removed head's row is uniform over
    the positions it may see.
    """
    check_gate_has_mask(mask, gate, alpha)
    ids = prompt_ids(model, prompt, formatted=formatted)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    rows: dict[str, Tensor] = {}

    def keep(pattern: Float[Tensor, "batch n_heads query key"], hook) -> None:
        rows[hook.name] = pattern[0, :, -1].detach().float().cpu()

    hooks = [(name, keep) for name in names]
    with torch.no_grad(), gated(model, mask, alpha=alpha, gate=gate), model.hooks(fwd_hooks=hooks):
        model(torch.tensor([ids], device=model.cfg.device))
    return torch.stack([rows[name] for name in names])
