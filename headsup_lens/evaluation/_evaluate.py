"""Answer loss, greedy accuracy and the paper's table of settings (Sec. 3.4)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..data import Task, encode_pairs, task_prompts
from ..data._tokenize import collate, encode_prompt
from ..masks import HeadMask
from ..models import chat_template, left_pad, pad_token_id, stop_token_ids
from ..gates import Gate, gate_hooks
from ..training import answer_nll
from ._greedy import greedy_generate
from ._metrics import bleu, first_line, rouge_l

MaskArg = HeadMask | Tensor | None


def _batches(n: int, batch_size: int) -> list[range]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return [range(i, min(n, i + batch_size)) for i in range(0, n, batch_size)]


def _rows_of(mask: MaskArg, rows: range, n: int) -> MaskArg:
    """The mask for a slice of examples: per-row masks `[n_examples, n_layers, n_heads]` are sliced."""
    if isinstance(mask, Tensor) and mask.ndim == 3:
        if mask.shape[0] != n:
            raise ValueError(f"per-row mask has {mask.shape[0]} rows for {n} examples")
        return mask[rows.start:rows.stop]
    return mask


def answer_loss(
    model: TransformerBridge, task: Task, *, mask: MaskArg = None, alpha: float = 0.0, instructed: bool = False,
    gate: Gate = "value", split: str = "eval", batch_size: int = 16,
) -> float:
    """Mean negative log-likelihood (nats) per answer token, end-of-turn included (the paper's "PPL").

    Tokens are pooled over the whole split, so the value does not depend on `batch_size`. `mask` may
    be per example `[n_examples, n_layers, n_heads]`. Only answer positions are unembedded.
    """
    users, shots, answers = task_prompts(task, split, instructed)
    rows = encode_pairs(model, list(zip(users, answers)), shots=shots if task.shots else None)
    total, count = 0.0, 0
    pad_id = pad_token_id(model)
    for chunk in _batches(len(rows), batch_size):
        batch = collate([rows[i] for i in chunk], pad_id=pad_id, device=model.cfg.device)
        with torch.no_grad():
            nll, _ = answer_nll(model, batch, gate_hooks(model, _rows_of(mask, chunk, len(rows)), alpha=alpha, gate=gate))
        total += float(nll.double().sum())
        count += nll.numel()
    return total / count


def generate_answers(
    model: TransformerBridge, prompts: Sequence[list[int]], *, mask: MaskArg = None, alpha: float = 0.0,
    gate: Gate = "value", max_new_tokens: int = 10, batch_size: int = 16,
) -> list[str]:
    """Greedy continuations of tokenised prompts, batched and left-padded, cut at the end of the turn.

    `mask` may be per prompt `[n_prompts, n_layers, n_heads]`: each row is generated under its own mask.
    Prompts of similar length share a chunk (less padding); each chunk unembeds only the last
    position and drops rows at their stop token (`greedy_generate`). Every row equals its own
    unbatched `model.generate` continuation.
    """
    tokenizer = model.tokenizer
    stops = stop_token_ids(model)
    mask = _rows_of(mask, range(len(prompts)), len(prompts))
    per_row = isinstance(mask, Tensor) and mask.ndim == 3
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out = [""] * len(prompts)
    for chunk in _batches(len(prompts), batch_size):
        rows = [order[i] for i in chunk]
        ids, attention = left_pad([prompts[i] for i in rows], pad_id=pad_token_id(model), device=model.cfg.device)
        result = greedy_generate(model, ids, attention, max_new_tokens=max_new_tokens, stops=stops,
                                 mask=mask[rows] if per_row else mask, alpha=alpha, gate=gate)
        for i, tokens in zip(rows, result.tokens):
            out[i] = tokenizer.decode(tokens, skip_special_tokens=True)
    return out


def generations(
    model: TransformerBridge, task: Task, *, mask: MaskArg = None, alpha: float = 0.0, instructed: bool = False,
    gate: Gate = "value", split: str = "eval", max_new_tokens: int | None = None, batch_size: int = 16,
) -> list[str]:
    """Greedy generations for every example of a task split (see `generate_answers`)."""
    users, shots, _ = task_prompts(task, split, instructed)
    template = chat_template(model)
    prompts = [encode_prompt(model, u, s, template=template) for u, s in zip(users, shots)]
    return generate_answers(model, prompts, mask=mask, alpha=alpha, gate=gate, batch_size=batch_size,
                            max_new_tokens=max_new_tokens or task.max_new_tokens)


def accuracy(
    model: TransformerBridge, task: Task, *, mask: MaskArg = None, alpha: float = 0.0, instructed: bool = False,
    gate: Gate = "value", split: str = "eval", max_new_tokens: int = 10, batch_size: int = 16,
) -> float:
    """Fraction of greedy generations (`max_new_tokens` new tokens) that the task's matcher accepts."""
    answers = task_prompts(task, split, instructed)[2]
    texts = generations(model, task, mask=mask, alpha=alpha, instructed=instructed, gate=gate, split=split,
                        max_new_tokens=max_new_tokens, batch_size=batch_size)
    return sum(task.is_correct(t, a) for t, a in zip(texts, answers)) / len(answers)


def evaluate(
    model: TransformerBridge, task: Task, mask: HeadMask, *, other_mask: HeadMask | None = None, alpha: float = 0.25,
    gate: Gate = "value", split: str = "eval", max_new_tokens: int | None = None, batch_size: int = 16,
    random_seed: int = 0, generate: bool = True,
) -> pd.DataFrame:
    """The paper's comparison table for one task and mask, one row per setting.

    Settings: original, instructed, masked, random mask (`mask.shuffled(random_seed)`, same size),
    other model's mask (`other_mask`, e.g. the base model's), instructed + scaled mask (heads outside
    the mask scaled by `alpha`; value gate only). Instructed rows need `task.instruction`. Columns: answer_nll (mean
    token NLL in nats, the paper's "PPL"), perplexity (exp of it), accuracy (greedy, task matcher),
    rouge_l (mean F1; characters when `task.char_level`) and bleu (sacrebleu), the last three on
    the first line of each generation for ROUGE/BLEU. `generate=False` skips generation metrics.
    """
    if not isinstance(mask, HeadMask):
        raise ValueError(f"mask must be a HeadMask, not {type(mask).__name__}")
    mask.check_model(model)
    if other_mask is not None:
        if not isinstance(other_mask, HeadMask):
            raise ValueError(f"other_mask must be a HeadMask, not {type(other_mask).__name__}")
        other_mask.check_model(model)
    settings: list[tuple[str, HeadMask | None, float, bool]] = [("original", None, 0.0, False)]
    if task.instruction is not None:
        settings.append(("instructed", None, 0.0, True))
    settings += [("masked", mask, 0.0, False), ("random mask", mask.shuffled(random_seed), 0.0, False)]
    if other_mask is not None:
        settings.append(("other model's mask", other_mask, 0.0, False))
    if task.instruction is not None and gate == "value":  # alpha scaling is defined for the value gate only
        settings.append(("instructed + scaled mask", mask, alpha, True))
    answers = task_prompts(task, split)[2]
    records = []
    for name, setting_mask, setting_alpha, instructed in settings:
        options = dict(mask=setting_mask, alpha=setting_alpha, instructed=instructed, gate=gate, split=split,
                       batch_size=batch_size)
        nll = answer_loss(model, task, **options)
        record = {"task": task.name, "setting": name, "instructed": instructed, "alpha": setting_alpha,
                  "n_kept": setting_mask.n_kept if setting_mask is not None else model.cfg.n_layers * model.cfg.n_heads,
                  "n_examples": len(answers), "answer_nll": nll, "perplexity": math.exp(nll)}
        if generate:
            texts = generations(model, task, max_new_tokens=max_new_tokens, **options)
            lines = [first_line(t) for t in texts]
            record.update(
                accuracy=sum(task.is_correct(t, a) for t, a in zip(texts, answers)) / len(answers),
                rouge_l=rouge_l(lines, answers, char_level=task.char_level),
                bleu=bleu(lines, answers, char_level=task.char_level),
            )
        records.append(record)
    return pd.DataFrame.from_records(records)
