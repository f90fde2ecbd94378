"""The two model runs behind every evaluation: the answer loss and greedy generation, on prompts
encoded once (`EncodedSplit`), so that every setting of a table reads the same tokens."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from typing_extensions import TypedDict, Unpack

from .._distributed import gather, padded_share, rank_and_world, shard
from .._progress import progress as progress_bar
from .._validate import check_int
from ..data import Task
from ..data._tokenize import EncodedSplit, collate, encode_split
from ..gates import Gate, gate_hooks
from ..masks import HeadMask
from ..models import left_pad, pad_token_id, stop_token_ids
from ..models._sharding import every_rank, is_sharded, lockstep
from ..objective import answer_nll, greedy_generate, length_batches

MaskArg = HeadMask | Tensor | None
Advance = Callable[[int], object]  # told how many examples one batch finished (a progress bar's update)
Reduction = Literal["example", "token"]


class GateOptions(TypedDict, total=False):
    """How a model pass is gated: the keyword options of `generate_answers`."""

    mask: MaskArg
    """Heads kept: a `HeadMask`, a `[n_layers, n_heads]` tensor, or one per example `[n_examples, n_layers, n_heads]`
    (default None: the whole model)."""
    alpha: float
    """Scale of the heads outside the mask (value gate; default 0.0: removed)."""
    gate: Gate
    """Where the mask acts: "value" (default) or "query"."""


class SplitOptions(GateOptions, total=False):
    """A pass over a task's split: the keyword options of `answer_loss`, `generations` and `accuracy`
    (the gating of `GateOptions`, and which prompts)."""

    instructed: bool
    """Prompts with the task's instruction (default False: the bare input)."""
    split: str
    """Which examples: "eval" (default, the held-out ones) or "train"."""
    batch_size: int
    """Examples per pass (default 16)."""


def _gating(options: GateOptions) -> tuple[MaskArg, float, Gate]:
    """(mask, alpha, gate) of `options`, with their defaults."""
    return options.get("mask"), options.get("alpha", 0.0), options.get("gate", "value")


def _rows_of(mask: MaskArg, rows: Sequence[int], n: int) -> MaskArg:
    """The mask for some of the examples: per-row masks `[n_examples, n_layers, n_heads]` are indexed."""
    if isinstance(mask, Tensor) and mask.ndim == 3:
        if mask.shape[0] != n:
            raise ValueError(f"per-row mask has {mask.shape[0]} rows for {n} examples")
        return mask[list(rows)]
    return mask


@every_rank
def answer_nll_per_example(
    model: TransformerBridge,
    encoded: EncodedSplit,
    *,
    mask: MaskArg = None,
    alpha: float = 0.0,
    gate: Gate = "value",
    batch_size: int = 16,
    advance: Advance | None = None,
    distributed: bool = False,
) -> tuple[Tensor, Tensor]:
    """Per example of an encoded split: the summed answer cross-entropy (nats, end of turn included)
    and the number of answer tokens, both `[n_examples]` float64. Only answer positions are
    unembedded; `mask` may be per example `[n_examples, n_layers, n_heads]`. Rows of similar length
    share a pass (`length_batches`, at most `batch_size` rows); `advance(k)` follows each pass.
    `distributed=True` (always on a sharded model) splits the examples over the ranks of the
    process group; every rank returns every example's values."""
    check_int("batch_size", batch_size, minimum=1)
    rows = encoded.rows
    mask = _rows_of(mask, range(len(rows)), len(rows))
    split = rank_rows(model, len(rows), distributed)
    if split is None:
        return _nll_rows(model, list(rows), mask, alpha, gate, batch_size, advance)
    mine, run = split
    idle = 0
    if lockstep(model):  # a sharded model's passes are collectives: every rank runs as many
        rank, world = rank_and_world()
        counts = [
            len(length_batches(model, [rows[i] for i in padded_share(len(rows), r, world)[1]], max_rows=batch_size))
            for r in range(world)
        ]
        idle = max(counts) - counts[rank]
    sums, counts_ = _nll_rows(
        model, [rows[i] for i in run], _rows_of(mask, run, len(rows)), alpha, gate, batch_size, advance, idle
    )
    pieces = gather((sums[: len(mine)], counts_[: len(mine)]))
    return torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces])


def rank_rows(model: TransformerBridge, n: int, distributed: bool) -> tuple[range, list[int]] | None:
    """This rank's rows of `range(n)` and the rows it runs when the work is split over the ranks
    (`distributed`, or a sharded model over several ranks), else None. A sharded model's ranks run
    as many rows each (`padded_share`); otherwise each runs its own."""
    if not (distributed or is_sharded(model)):
        return None
    rank, world = rank_and_world(required=True)
    if world == 1:
        return None
    if lockstep(model):
        return padded_share(n, rank, world)
    mine = shard(n, rank, world)
    return mine, list(mine)


def _nll_rows(
    model: TransformerBridge,
    rows: list,
    mask: MaskArg,
    alpha: float,
    gate: Gate,
    batch_size: int,
    advance: Advance | None,
    idle: int = 0,
) -> tuple[Tensor, Tensor]:
    """`answer_nll_per_example` of `rows` in this process, then `idle` passes whose result is dropped."""
    sums = torch.zeros(len(rows), dtype=torch.float64)
    counts = torch.zeros(len(rows), dtype=torch.float64)
    pad_id = pad_token_id(model)
    chunks = length_batches(model, rows, max_rows=batch_size) if rows else []
    passes = [(chunk, True) for chunk in chunks] + [(chunks[0][:1], False)] * idle
    for chunk, real in passes:
        batch = collate([rows[i] for i in chunk], pad_id=pad_id, device=model.cfg.device)
        with torch.no_grad():
            nll, owner = answer_nll(
                model, batch, gate_hooks(model, _rows_of(mask, chunk, len(rows)), alpha=alpha, gate=gate)
            )
        if not real:
            continue
        owner = torch.tensor(chunk)[owner.cpu()]
        sums.index_add_(0, owner, nll.double().cpu())
        counts.index_add_(0, owner, torch.ones_like(owner, dtype=torch.float64))
        if advance is not None:
            advance(len(chunk))
    return sums, counts


def reduce_nll(sums: Tensor, counts: Tensor, reduction: Reduction = "example") -> float:
    """`"example"`: mean over examples of each example's mean token NLL (the paper's "PPL");
    `"token"`: every answer token pooled (what a training batch averages). The callers pass a
    checked `reduction` (`answer_loss`'s type check reads the `Literal`)."""
    if reduction == "token":
        return float(sums.sum() / counts.sum())
    return float((sums / counts).mean())


@every_rank
def answer_loss(
    model: TransformerBridge, task: Task, *, reduction: Reduction = "example", **options: Unpack[SplitOptions]
) -> float:
    """Answer cross-entropy (nats, end-of-turn token included): the paper's "PPL", on the split,
    prompts and gating of `options` (`SplitOptions`).

    `reduction="example"` (the paper's definition): each example's mean over its answer tokens,
    then the mean over examples; `"token"`: all answer tokens of the split pooled. Neither depends
    on `batch_size`. See `answer_nll_per_example` for `mask`.
    """
    encoded = encode_split(model, task, options.get("split", "eval"), options.get("instructed", False))
    mask, alpha, gate = _gating(options)
    sums, counts = answer_nll_per_example(  # batch_size: checked there
        model, encoded, mask=mask, alpha=alpha, gate=gate, batch_size=options.get("batch_size", 16)
    )
    return reduce_nll(sums, counts, reduction)


def _batches(n: int, batch_size: int) -> list[range]:
    return [range(i, min(n, i + batch_size)) for i in range(0, n, batch_size)]


def answers_and_nll(
    model: TransformerBridge,
    encoded: EncodedSplit,
    *,
    mask: MaskArg,
    alpha: float,
    gate: Gate,
    max_new_tokens: int,
    batch_size: int,
    advance: Advance | None = None,
    distributed: bool = False,
) -> tuple[list[str], Tensor, Tensor]:
    """`generate_answers` of the split's prompts and `answer_nll_per_example` of its rows, with each
    answer scored from its prompt's decoding pass (`greedy_generate(answers=...)`: on the direct and
    native forward passes a prompt is computed once for both). Where joint tokenisation gave an example's
    row another prompt than generation continues (`EncodedSplit`), that row is scored by its own
    pass. `advance(k)` after each chunk of k examples. `distributed=True` (always on a sharded model)
    splits the examples over the ranks; every rank returns every example's outputs."""
    rows = encoded.rows
    answers = [a for _, a in rows]
    split = rank_rows(model, len(rows), distributed)
    if split is None:
        texts, scored = _decode(model, encoded.prompts, answers, mask, alpha, gate, max_new_tokens, batch_size, advance)
    else:  # each rank decodes its examples (a sharded model's ranks as many each), every rank gets all
        mine, run = split
        texts, scored = _decode(
            model,
            [encoded.prompts[i] for i in run],
            [answers[i] for i in run],
            _rows_of(mask, run, len(rows)),
            alpha,
            gate,
            max_new_tokens,
            batch_size,
            advance,
        )
        pieces = gather((texts[: len(mine)], scored[: len(mine)]))
        texts, scored = [t for p in pieces for t in p[0]], [x for p in pieces for x in p[1]]
    sums = torch.tensor([float(nll.double().sum()) for nll in scored], dtype=torch.float64)
    counts = torch.tensor([float(len(a)) for _, a in rows], dtype=torch.float64)
    other = [i for i, (row, prompt) in enumerate(zip(rows, encoded.prompts)) if row[0] != prompt]
    if other:
        subset = replace(encoded, rows=tuple(rows[i] for i in other), prompts=tuple(encoded.prompts[i] for i in other))
        again, _ = answer_nll_per_example(
            model,
            subset,
            mask=_rows_of(mask, other, len(rows)),
            alpha=alpha,
            gate=gate,
            batch_size=batch_size,
            distributed=split is not None,
        )
        sums[other] = again
    return texts, sums, counts


def _decode(
    model: TransformerBridge,
    prompts: Sequence[list[int]],
    answers: Sequence[list[int]] | None,
    mask: MaskArg,
    alpha: float,
    gate: Gate,
    max_new_tokens: int,
    batch_size: int,
    advance: Advance | None,
) -> tuple[list[str], list[Tensor]]:
    """Greedy texts of `prompts` in chunks of similar length and, with `answers`, each answer's
    per-token cross-entropy (else an empty list)."""
    tokenizer = model.tokenizer
    stops = stop_token_ids(model)
    mask = _rows_of(mask, range(len(prompts)), len(prompts))
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out = [""] * len(prompts)
    scored: list[Tensor] = [torch.zeros(0)] * len(prompts) if answers is not None else []
    for chunk in _batches(len(prompts), batch_size):
        rows = [order[i] for i in chunk]
        # On the host: greedy_generate sees there whether the chunk is padded, and copies it without waiting.
        ids, attention = left_pad([prompts[i] for i in rows], pad_id=pad_token_id(model))
        result = greedy_generate(
            model,
            ids,
            attention,
            max_new_tokens=max_new_tokens,
            stops=stops,
            mask=mask[rows] if isinstance(mask, Tensor) and mask.ndim == 3 else mask,
            alpha=alpha,
            gate=gate,
            answers=None if answers is None else [answers[i] for i in rows],
        )
        for k, (i, tokens) in enumerate(zip(rows, result.tokens)):
            out[i] = tokenizer.decode(tokens, skip_special_tokens=True)
            if answers is not None and result.answer_nll is not None:
                scored[i] = result.answer_nll[k, : len(answers[i])]
        if advance is not None:
            advance(len(rows))
    return out, scored


@every_rank
def generate_answers(
    model: TransformerBridge,
    prompts: Sequence[list[int]],
    *,
    max_new_tokens: int = 10,
    batch_size: int = 16,
    progress: str | None = None,
    **gating: Unpack[GateOptions],
) -> list[str]:
    """Greedy continuations of tokenised prompts, batched and left-padded, cut at the end of the turn,
    under `gating` (`GateOptions`). `progress`, when given, labels a progress bar over the prompts
    (long runs show a sign of life).

    `mask` may be per prompt `[n_prompts, n_layers, n_heads]`: each row is generated under its own mask.
    Prompts of similar length share a chunk (less padding); each chunk unembeds only the last
    position and drops rows at their stop token (`greedy_generate`). Every row equals its own
    unbatched `model.generate` continuation.
    """
    check_int("batch_size", batch_size, minimum=1)
    mask, alpha, gate = _gating(gating)
    with progress_bar(
        total=len(prompts), desc=progress, unit="prompt", leave=False, enabled=progress is not None
    ) as bar:
        return _decode(model, prompts, None, mask, alpha, gate, max_new_tokens, batch_size, bar.update)[0]


@every_rank
def generations(
    model: TransformerBridge, task: Task, *, max_new_tokens: int | None = None, **options: Unpack[SplitOptions]
) -> list[str]:
    """Greedy generations for every example of a task split (see `generate_answers`; `max_new_tokens`
    defaults to the task's budget), on the split, prompts and gating of `options` (`SplitOptions`)."""
    return _split_generations(model, task, max_new_tokens, options)[0]


@every_rank
def accuracy(
    model: TransformerBridge, task: Task, *, max_new_tokens: int | None = None, **options: Unpack[SplitOptions]
) -> float:
    """Fraction of greedy generations that the task's matcher accepts (`max_new_tokens` new tokens;
    default the task's budget: 10 for simple tasks, 50 for sentence translation), on the split,
    prompts and gating of `options` (`SplitOptions`)."""
    texts, answers = _split_generations(model, task, max_new_tokens, options)
    return sum(task.is_correct(t, a) for t, a in zip(texts, answers)) / len(answers)


def _split_generations(
    model: TransformerBridge, task: Task, max_new_tokens: int | None, options: SplitOptions
) -> tuple[list[str], list[str]]:
    """The greedy generations of a task split and the split's answers."""
    encoded = encode_split(model, task, options.get("split", "eval"), options.get("instructed", False))
    mask, alpha, gate = _gating(options)
    texts = generate_answers(
        model,
        encoded.prompts,
        max_new_tokens=max_new_tokens or task.max_new_tokens,
        batch_size=options.get("batch_size", 16),
        mask=mask,
        alpha=alpha,
        gate=gate,
    )
    return texts, list(encoded.answers)
