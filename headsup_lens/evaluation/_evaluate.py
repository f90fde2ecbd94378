"""Answer loss, greedy accuracy and the paper's table of settings (Sec. 3.4)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import pandas as pd
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._typecheck import checked
from .._warnings import warn
from ..data import Task, encode_pairs, task_prompts
from ..data._tokenize import collate, encode_prompt
from ..gates import Gate, gate_hooks
from ..masks import HeadMask
from ..models import fingerprint, left_pad, pad_token_id, prompt_format, stop_token_ids
from ..objective import answer_nll, greedy_generate, length_batches
from ._metrics import bleu, first_line, rouge_l
from ._scoring import instructed_rows_left_out, majority_label, mcnemar_exact, score_outputs, task_labels
from ._translation_metrics import paper_bleu, paper_rouge_l, target_language_share

MaskArg = HeadMask | Tensor | None
TEXT_STYLES = ("paper", "first_line")


def _batches(n: int, batch_size: int) -> list[range]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return [range(i, min(n, i + batch_size)) for i in range(0, n, batch_size)]


def _rows_of(mask: MaskArg, rows: Sequence[int], n: int) -> MaskArg:
    """The mask for some of the examples: per-row masks `[n_examples, n_layers, n_heads]` are indexed."""
    if isinstance(mask, Tensor) and mask.ndim == 3:
        if mask.shape[0] != n:
            raise ValueError(f"per-row mask has {mask.shape[0]} rows for {n} examples")
        return mask[list(rows)]
    return mask


Reduction = Literal["example", "token"]
REDUCTIONS = ("example", "token")


def answer_nll_per_example(
    model: TransformerBridge,
    task: Task,
    *,
    mask: MaskArg = None,
    alpha: float = 0.0,
    instructed: bool = False,
    gate: Gate = "value",
    split: str = "eval",
    batch_size: int = 16,
) -> tuple[Tensor, Tensor]:
    """Per example of the split: the summed answer cross-entropy (nats, end of turn included) and
    the number of answer tokens, both `[n_examples]` float64. Only answer positions are unembedded;
    `mask` may be per example `[n_examples, n_layers, n_heads]`."""
    users, shots, answers = task_prompts(task, split, instructed)
    rows = encode_pairs(model, list(zip(users, answers)), shots=shots)
    sums = torch.zeros(len(rows), dtype=torch.float64)
    counts = torch.zeros(len(rows), dtype=torch.float64)
    pad_id = pad_token_id(model)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    for chunk in length_batches(model, rows, max_rows=batch_size):
        batch = collate([rows[i] for i in chunk], pad_id=pad_id, device=model.cfg.device)
        with torch.no_grad():
            nll, owner = answer_nll(
                model, batch, gate_hooks(model, _rows_of(mask, chunk, len(rows)), alpha=alpha, gate=gate)
            )
        owner = torch.tensor(chunk)[owner.cpu()]
        sums.index_add_(0, owner, nll.double().cpu())
        counts.index_add_(0, owner, torch.ones_like(owner, dtype=torch.float64))
    return sums, counts


def reduce_nll(sums: Tensor, counts: Tensor, reduction: Reduction = "example") -> float:
    """`"example"`: mean over examples of each example's mean token NLL (the paper's "PPL");
    `"token"`: every answer token pooled (what a training batch averages)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, not {reduction!r}")
    if reduction == "token":
        return float(sums.sum() / counts.sum())
    return float((sums / counts).mean())


@checked
def answer_loss(
    model: TransformerBridge,
    task: Task,
    *,
    mask: MaskArg = None,
    alpha: float = 0.0,
    instructed: bool = False,
    gate: Gate = "value",
    split: str = "eval",
    batch_size: int = 16,
    reduction: Reduction = "example",
) -> float:
    """Answer cross-entropy (nats, end-of-turn token included): the paper's "PPL".

    `reduction="example"` (the paper's definition): each example's mean over its answer tokens,
    then the mean over examples; `"token"`: all answer tokens of the split pooled. Neither depends
    on `batch_size`. See `answer_nll_per_example` for `mask`.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, not {reduction!r}")
    sums, counts = answer_nll_per_example(
        model, task, mask=mask, alpha=alpha, instructed=instructed, gate=gate, split=split, batch_size=batch_size
    )
    return reduce_nll(sums, counts, reduction)


@checked
def generate_answers(
    model: TransformerBridge,
    prompts: Sequence[list[int]],
    *,
    mask: MaskArg = None,
    alpha: float = 0.0,
    gate: Gate = "value",
    max_new_tokens: int = 10,
    batch_size: int = 16,
    progress: str | None = None,
) -> list[str]:
    """Greedy continuations of tokenised prompts, batched and left-padded, cut at the end of the turn.
    `progress`, when given, labels a progress bar over the batches (long runs show a sign of life).

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
    from tqdm.auto import tqdm

    chunks = list(_batches(len(prompts), batch_size))
    for chunk in tqdm(chunks, desc=progress, disable=progress is None, leave=False, dynamic_ncols=True):
        rows = [order[i] for i in chunk]
        ids, attention = left_pad([prompts[i] for i in rows], pad_id=pad_token_id(model), device=model.cfg.device)
        result = greedy_generate(
            model,
            ids,
            attention,
            max_new_tokens=max_new_tokens,
            stops=stops,
            mask=mask[rows] if per_row else mask,
            alpha=alpha,
            gate=gate,
        )
        for i, tokens in zip(rows, result.tokens):
            out[i] = tokenizer.decode(tokens, skip_special_tokens=True)
    return out


@checked
def generations(
    model: TransformerBridge,
    task: Task,
    *,
    mask: MaskArg = None,
    alpha: float = 0.0,
    instructed: bool = False,
    gate: Gate = "value",
    split: str = "eval",
    max_new_tokens: int | None = None,
    batch_size: int = 16,
) -> list[str]:
    """Greedy generations for every example of a task split (see `generate_answers`)."""
    users, shots, _ = task_prompts(task, split, instructed)
    template = prompt_format(model)
    prompts = [encode_prompt(model, u, s, template=template) for u, s in zip(users, shots)]
    return generate_answers(
        model,
        prompts,
        mask=mask,
        alpha=alpha,
        gate=gate,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens or task.max_new_tokens,
    )


@checked
def accuracy(
    model: TransformerBridge,
    task: Task,
    *,
    mask: MaskArg = None,
    alpha: float = 0.0,
    instructed: bool = False,
    gate: Gate = "value",
    split: str = "eval",
    max_new_tokens: int | None = None,
    batch_size: int = 16,
) -> float:
    """Fraction of greedy generations that the task's matcher accepts (`max_new_tokens` new tokens;
    default the task's budget: 10 for simple tasks, 50 for sentence translation)."""
    answers = task_prompts(task, split, instructed)[2]
    texts = generations(
        model,
        task,
        mask=mask,
        alpha=alpha,
        instructed=instructed,
        gate=gate,
        split=split,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
    )
    return sum(task.is_correct(t, a) for t, a in zip(texts, answers)) / len(answers)


def _as_head_mask(name: str, mask: HeadMask | Tensor, model: TransformerBridge) -> HeadMask:
    if isinstance(mask, HeadMask):
        return mask
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a HeadMask or a [n_layers, n_heads] tensor, not {type(mask).__name__}")
    return HeadMask(mask.detach().float().cpu(), model=fingerprint(model))


CONTROLS = ("echo baseline", "majority label")  # rows scored from fixed outputs, no model run
MASK_SETTINGS = ("masked", "random mask", "other model's mask", "instructed + scaled mask")


@checked
def evaluate(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask | Tensor,
    *,
    other_mask: HeadMask | Tensor | None = None,
    alpha: float = 0.25,
    gate: Gate = "value",
    split: str = "eval",
    max_new_tokens: int | None = None,
    batch_size: int = 16,
    random_seed: int = 0,
    generate: bool = True,
    text_metrics: bool | None = None,
    text_style: str = "paper",
    on_row: Callable[[pd.DataFrame], None] | None = None,
    return_generations: bool = False,
    settings: Sequence[str] | None = None,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """The paper's comparison table for one task and mask, one row per setting.

    Settings: original, instructed, masked, random mask (`mask.shuffled(random_seed)`, same size),
    other model's mask (`other_mask`, e.g. the base model's), instructed + scaled mask (heads outside
    the mask scaled by `alpha`; value gate only). Instructed rows need `task.instruction`. Columns:
    `answer_nll` (nats: each example's mean answer-token cross-entropy, averaged over examples; the
    paper's "PPL"), `perplexity` (exp of the token-pooled cross-entropy: a true perplexity),
    `accuracy` (greedy, the task's matcher), and for sentence answers the text metrics.
    `text_style="paper"` (the reference code's): `rouge_l` on the whole generation and `bleu` (Table 8's
    mean sentence BLEU, 0-1), see `paper_rouge_l` / `paper_bleu`; `"first_line"`: `rouge_l_first_line`
    (lower-cased words, characters when `task.char_level`) and `sacrebleu_first_line` (corpus BLEU,
    0-100) on the first line. Translation tasks also get `target_language_share`.
    `text_metrics=None` shows them for every translation task, and otherwise when the answers
    average more than two words (on one-word answers they only restate accuracy).

    Every generated setting also carries (`score_outputs`): `strict` (the normalised first line of
    the output equals the normalised answer), 95% Wilson bounds `accuracy_low/high` and
    `strict_low/high`, `echo` (outputs that repeat the input, `is_echo`) and `empty` counts, and
    for label tasks (`task_labels`) `balanced_accuracy` and `predicted_labels`. Mask settings carry
    exact McNemar p-values of their paper-matcher hits against the original (`p_vs_original`) and
    instructed (`p_vs_instructed`) rows on the same examples. Two control rows need no model:
    "echo baseline" (each output is the bare input) and, for label tasks, "majority label" (each
    output is the most frequent label of the training pairs).

    `generate=False` skips generation (and every score above). `on_row` is called with the table so
    far after each setting (to save finished rows as they come). `return_generations=True` returns
    `(table, generations)`: one row per setting and example with its input, answer, output and
    per-example scores, so every number of the table can be read against its outputs.
    `mask_task` is the task the mask was trained for (its metadata); another task than `task` warns.
    `settings` runs only the named rows (e.g. `["masked", "random mask"]` for a second mask seed whose
    reference rows exist already; their McNemar p-values are then NaN: they need the reference rows).
    """
    mask = _as_head_mask("mask", mask, model)  # a plain [n_layers, n_heads] tensor works as everywhere else
    mask.check_model(model)
    mask_task = mask.metadata.get("task")  # recorded by training; absent for hand-made masks
    if mask_task is not None and mask_task != task.name:
        warn(f"the mask was trained for task {mask_task!r}, not {task.name!r} (column mask_task)")
    if other_mask is not None:
        other_mask = _as_head_mask("other_mask", other_mask, model)
        other_mask.check_model(model, allow_other_weights=True)  # the paper's base <-> instruct swap
    rows_wanted = settings
    if task.instruction is None and rows_wanted is None:
        warn(instructed_rows_left_out(task))
    settings: list[tuple[str, HeadMask | None, float, bool]] = [("original", None, 0.0, False)]
    if task.instruction is not None:
        settings.append(("instructed", None, 0.0, True))
    settings += [("masked", mask, 0.0, False), ("random mask", mask.shuffled(random_seed), 0.0, False)]
    if other_mask is not None:
        settings.append(("other model's mask", other_mask, 0.0, False))
    if task.instruction is not None and gate == "value":  # alpha scaling is defined for the value gate only
        settings.append(("instructed + scaled mask", mask, alpha, True))
    control_names = ["echo baseline", "majority label"]
    if rows_wanted is not None:
        unknown = sorted(set(rows_wanted) - {name for name, *_ in settings} - set(control_names))
        if unknown:
            raise ValueError(
                f"settings: unknown or unavailable for this task and gate: {unknown}; "
                f"choose from {[name for name, *_ in settings] + control_names}"
            )
        settings = [s for s in settings if s[0] in rows_wanted]
    if text_style not in TEXT_STYLES:
        raise ValueError(f"text_style must be one of {TEXT_STYLES}, not {text_style!r}")
    inputs, _, answers = task_prompts(task, split)
    if text_metrics is None:  # translation by its target language: Chinese answers have no spaces to count
        text_metrics = task.is_translation or sum(len(a.split()) for a in answers) / len(answers) > 2
    labels = task_labels(task) if generate else None
    records, texts_of, per_example = [], {}, {}

    def add(record: dict, texts: list[str]) -> None:
        if generate:
            scores, per = score_outputs(task, texts, inputs, answers, labels)
            texts_of[record["setting"]], per_example[record["setting"]] = texts, per
            for reference in ("original", "instructed"):  # paired tests on the same examples
                scores[f"p_vs_{reference}"] = (
                    mcnemar_exact(per["correct"], per_example[reference]["correct"])
                    if record["setting"] in MASK_SETTINGS and reference in per_example
                    else float("nan")
                )
            record.update(
                dict(sorted(scores.items(), key=lambda kv: kv[0] in ("balanced_accuracy", "predicted_labels")))
            )
            if text_metrics and text_style == "paper":
                record.update(rouge_l=paper_rouge_l(texts, answers), bleu=paper_bleu(texts, answers))
            elif text_metrics:
                lines = [first_line(t) for t in texts]
                record.update(
                    rouge_l_first_line=rouge_l(lines, answers, char_level=task.char_level),
                    sacrebleu_first_line=bleu(lines, answers, char_level=task.char_level),
                )
            if task.is_translation:
                record["target_language_share"] = target_language_share(texts, task.target_language)
        records.append(record)
        if on_row is not None:
            on_row(pd.DataFrame.from_records(records))

    for name, setting_mask, setting_alpha, instructed in settings:
        options = dict(
            mask=setting_mask, alpha=setting_alpha, instructed=instructed, gate=gate, split=split, batch_size=batch_size
        )
        sums, counts = answer_nll_per_example(model, task, **options)
        record = {
            "task": task.name,
            "mask_task": mask_task,
            "setting": name,
            "instructed": instructed,
            "alpha": setting_alpha,
            "n_kept": setting_mask.n_kept if setting_mask is not None else model.cfg.n_layers * model.cfg.n_heads,
            "n_examples": len(answers),
            "answer_nll": reduce_nll(sums, counts, "example"),
            "perplexity": math.exp(reduce_nll(sums, counts, "token")),
        }
        add(record, generations(model, task, max_new_tokens=max_new_tokens, **options) if generate else [])
    if generate:
        controls = {"echo baseline": list(inputs)}
        if labels is not None:
            majority = majority_label(task, labels, split)
            controls["majority label"] = [
                majority if labels.kind == "answer" else x.split(",")[int(majority) - 1].strip() for x in inputs
            ]
        for name, texts in controls.items():
            if rows_wanted is not None and name not in rows_wanted:
                continue
            record = {
                "task": task.name,
                "setting": name,
                "instructed": False,
                "alpha": float("nan"),
                "n_kept": float("nan"),
                "n_examples": len(answers),
                "answer_nll": float("nan"),
                "perplexity": float("nan"),
            }
            add(record, texts)
    table = pd.DataFrame.from_records(records)
    if not return_generations:
        return table
    rows = [
        {
            "task": task.name,
            "setting": name,
            "example": i,
            "input": inputs[i],
            "answer": answers[i],
            "output": text,
            **{key: values[i] for key, values in per_example[name].items()},
        }
        for name, texts in texts_of.items()
        for i, text in enumerate(texts)
    ]
    return table, pd.DataFrame.from_records(rows)
