"""Prompts and training batches: format(x) ‖ y ‖ end-of-turn, with labels on the answer only."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import to_device
from ..models import PromptFormat, check_context, encode, pad_token_id, prompt_format
from ._task import Pair, Shots, Task

IGNORE_INDEX = -100  # label of every token that is not part of the answer (PyTorch's ignore_index)


def render_prompt(
    model: TransformerBridge, user_text: str, shots: Shots = (), *, template: PromptFormat | None = None
) -> str:
    """The prompt text up to the assistant's answer, with optional demonstrations as earlier turns,
    in the model's prompt format (`prompt_format(model)`, the paper's by default)."""
    return (template or prompt_format(model)).render(user_text, tuple(shots))


def task_prompts(task: Task, split: str = "eval", instructed: bool = False) -> tuple[list[str], list[Shots], list[str]]:
    """User texts, demonstrations and answers of a task split, in order."""
    indices = task.split_indices(split)
    users = [task.user_text(task.pairs[i][0], instructed) for i in indices]
    shots = [task.demonstrations(i) for i in indices]
    answers = [task.pairs[i][1] for i in indices]
    return users, shots, answers


def encode_prompt(
    model: TransformerBridge, user_text: str, shots: Shots = (), *, template: PromptFormat | None = None
) -> list[int]:
    """Token ids of `render_prompt(...)`, with BOS exactly when the format wants it."""
    template = template or prompt_format(model)
    return encode(model, render_prompt(model, user_text, shots, template=template), add_bos=template.add_bos)


def encode_example(
    model: TransformerBridge, user_text: str, answer: str, shots: Shots = (), *, template: PromptFormat | None = None
) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids) of one example, tokenised jointly as the paper's code does.

    `prompt + answer + end-of-turn` is tokenised as one string and split after as many tokens as
    the prompt alone has: tokenizers that merge across the boundary or mark word starts ("▁")
    give the answer the tokens the model actually sees. An answer that leaves no token is a
    ValueError.
    """
    return _encode_both(model, user_text, answer, shots, template or prompt_format(model))[1]


def _encode_both(
    model: TransformerBridge, user_text: str, answer: str, shots: Shots, template: PromptFormat
) -> tuple[list[int], tuple[list[int], list[int]]]:
    """(the prompt alone, `encode_example`'s row) from one rendering of the prompt."""
    prompt = render_prompt(model, user_text, shots, template=template)
    prompt_ids = encode(model, prompt, add_bos=template.add_bos)
    full = encode(model, prompt + template.answer(answer), add_bos=template.add_bos)
    n_prompt = len(prompt_ids)
    if not template.clean(answer) or len(full) <= n_prompt:
        raise ValueError(f"answer {answer!r} is empty after tokenisation; every pair needs a non-empty output")
    check_context(model, len(full), "example (prompt and answer)")
    return prompt_ids, (full[:n_prompt], full[n_prompt:])


@dataclass(frozen=True)
class EncodedSplit:
    """One split of a task tokenised once for one prompt (bare or instructed): what the answer loss
    and greedy generation both read, so that neither renders nor tokenises the prompts again.

    `inputs` / `answers`: the split's bare inputs and reference answers, in order. `rows`: per
    example (prompt ids, answer ids), prompt and answer tokenised jointly (`encode_example`): the
    loss's input. `prompts`: per example the prompt alone (`encode_prompt`): what generation continues.
    """

    task: str
    split: str
    instructed: bool
    inputs: tuple[str, ...]
    answers: tuple[str, ...]
    rows: tuple[tuple[list[int], list[int]], ...]
    prompts: tuple[list[int], ...]

    def __len__(self) -> int:
        return len(self.rows)


def encode_split(model: TransformerBridge, task: Task, split: str = "eval", instructed: bool = False) -> EncodedSplit:
    """`task`'s `split` rendered in the model's prompt format (with the instruction when `instructed`,
    with each pair's demonstrations) and tokenised, one rendering per example (see `EncodedSplit`)."""
    users, shots, answers = task_prompts(task, split, instructed)
    template = prompt_format(model)
    both = [_encode_both(model, u, a, s, template) for u, s, a in zip(users, shots, answers)]
    return EncodedSplit(
        task=task.name,
        split=split,
        instructed=instructed,
        inputs=tuple(task.pairs[i][0] for i in task.split_indices(split)),
        answers=tuple(answers),
        rows=tuple(row for _, row in both),
        prompts=tuple(prompt for prompt, _ in both),
    )


@dataclass
class TaskBatch:
    """Right-padded training batch: `labels` are -100 except on answer and end-of-turn tokens.

    `labels[b, t]` is the target of position t (predicted from position t-1), as in Hugging Face.
    """

    input_ids: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"]
    labels: Int[Tensor, "batch pos"]
    # `answer_positions(labels)` and whether every row is right-padded, known where the batch is made
    # (`collate` reads them off its rows): on a GPU searching the labels or the mask would be a host
    # synchronisation.
    _answers: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False, compare=False, kw_only=True)
    _right_padded: bool | None = field(default=None, repr=False, compare=False, kw_only=True)
    # The batch on the host this one was copied from (`to`): what a pass must read of a batch on a
    # GPU (its packed layout, `gates._packed`) is read there, without waiting for the device.
    _host: TaskBatch | None = field(default=None, repr=False, compare=False, kw_only=True)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def answers(self) -> tuple[Tensor, Tensor, Tensor]:
        """`answer_positions(self.labels)`: (row, position, target) of every answer token."""
        if self._answers is None:
            self._answers = answer_positions(self.labels)
        return self._answers

    def right_padded(self) -> bool:
        """Whether every row's padding comes after its tokens (as `collate` pads). Under causal
        attention no real token then attends to the padding, and positions count from 0 with or
        without the mask: a forward pass can leave the mask out, with the same result at the real
        tokens (the attention mask's own check would read the device back on a GPU)."""
        if self._right_padded is None:
            real = self.attention_mask.bool()
            self._right_padded = bool((real[:, 1:] <= real[:, :-1]).all())
        return self._right_padded

    def on_host(self) -> TaskBatch:
        """This batch on the CPU: itself, or the host batch it was copied from (`to`; nothing is read
        back from the device), else a copy (which waits for the device)."""
        if self.labels.device.type == "cpu":
            return self
        return self._host if self._host is not None else self.to("cpu")

    def to(self, device: torch.device | str) -> TaskBatch:
        """The same batch with `input_ids`, `attention_mask` and `labels` (each `[batch, pos]`) on
        `device`; a batch going from the CPU to a GPU is copied without a host synchronisation."""
        on_host = self.labels.device.type == "cpu"  # what needs reading is found here, for free
        answers = self.answers() if on_host else self._answers
        right_padded = self.right_padded() if on_host else self._right_padded
        ids, attention, labels = (to_device(t, device) for t in (self.input_ids, self.attention_mask, self.labels))
        if answers is not None:
            rows, positions, targets = (to_device(t, device) for t in answers)
            answers = (rows, positions, targets)
        host = self if on_host else self._host
        return TaskBatch(ids, attention, labels, _answers=answers, _right_padded=right_padded, _host=host)

    @property
    def n_answer_tokens(self) -> int:
        """How many label positions are scored (answer tokens, end of turn included; not `IGNORE_INDEX`)."""
        return int((self.labels != IGNORE_INDEX).sum())


def answer_positions(labels: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor, Tensor]:
    """(row, position, target) of every answer token, where `position` is the one predicting it."""
    rows, positions = (labels[:, 1:] != IGNORE_INDEX).nonzero(as_tuple=True)
    return rows, positions, labels[rows, positions + 1]


def length_groups(lengths: Sequence[int], *, overhead: float, max_rows: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length that minimise the tokens a pass computes.

    A right-padded batch computes `rows x longest row` tokens, and each pass costs about `overhead`
    tokens more (per-call work that does not scale with the batch). Rows sorted by length are cut
    into contiguous groups by an exact dynamic programme over that cost (`max_rows` caps a group);
    rows of a batch are independent, so every row's result is unchanged.

    Some cheapest cut has every group end where the length changes or hold `max_rows` rows (a
    group that ends inside a run of equal lengths and has room can take the next group's first
    row, of the same length, at no extra cost), so only those ends are tried: O(n + d^2) work for
    n rows of d distinct lengths, instead of O(n x max_rows) (a batch of a million rows is cut in
    seconds).
    """
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be positive, got {max_rows}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    cap = min(max_rows or n, n)
    # Group ends where the length changes (and the last row): a group ending there may start anywhere.
    changes = {j for j in range(1, n) if lengths[order[j]] != lengths[order[j - 1]]} | {n}
    best = [0.0] + [math.inf] * n  # best[j]: the cheapest cut of the j shortest rows (into such groups)
    cut = [0] * (n + 1)
    starts = [0]  # the j < current with a finite best[j], ascending: where the next group may start
    for j in range(1, n + 1):
        width = lengths[order[j - 1]]  # the longest row of any group ending at j
        if j in changes:
            candidates = starts[bisect.bisect_left(starts, j - cap) :]
        else:  # inside a run of equal lengths only a full group may end
            candidates = [j - cap] if j >= cap and best[j - cap] < math.inf else []
        for i in candidates:
            cost = best[i] + (j - i) * width + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
        if best[j] < math.inf:
            starts.append(j)
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def encode_pairs(
    model: TransformerBridge,
    pairs: Sequence[Pair],
    *,
    instruction: str | None = None,
    shots: Sequence[Shots] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) per pair (`encode_example`); see `tokenize_pairs`."""
    if shots is not None and len(shots) != len(pairs):
        raise ValueError(f"{len(shots)} demonstration lists for {len(pairs)} pairs")
    if instruction is not None and "{input}" not in instruction:
        raise ValueError(f"instruction template {instruction!r} lacks '{{input}}'")
    template = prompt_format(model)
    rows = []
    for i, (x, y) in enumerate(pairs):
        user = instruction.replace("{input}", x) if instruction is not None else x
        rows.append(encode_example(model, user, y, shots[i] if shots is not None else (), template=template))
    return rows


def collate(
    rows: Sequence[tuple[list[int], list[int]]], *, pad_id: int, device=None, width: int | None = None
) -> TaskBatch:
    """Right-pad encoded (prompt, answer) rows into a `TaskBatch` as wide as the longest row, or
    `width` columns (no fewer than the longest row has)."""
    if not rows:
        raise ValueError("cannot build a batch from no pairs")
    longest = max(len(p) + len(a) for p, a in rows)
    if width is not None and width < longest:
        raise ValueError(f"a batch of width {width} cannot hold a row of {longest} tokens")
    width = longest if width is None else width
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    # `answer_positions(labels)`, read off the rows (nothing to search for)
    answer_rows: list[int] = []
    positions: list[int] = []
    targets: list[int] = []
    for i, (prompt, answer) in enumerate(rows):
        n = len(prompt) + len(answer)
        ids[i, :n] = torch.tensor(prompt + answer)
        attention[i, :n] = 1
        labels[i, len(prompt) : n] = torch.tensor(answer)
        for position, target in enumerate(answer, start=len(prompt) - 1):
            if position >= 0:  # a first token with no prompt before it has no position predicting it
                answer_rows.append(i)
                positions.append(position)
                targets.append(target)
    answers = (
        torch.tensor(answer_rows, dtype=torch.long),
        torch.tensor(positions, dtype=torch.long),
        torch.tensor(targets, dtype=torch.long),
    )
    batch = TaskBatch(ids, attention, labels, _answers=answers, _right_padded=True)
    return batch.to(device) if device is not None else batch


def tokenize_pairs(
    model: TransformerBridge,
    pairs: Sequence[Pair],
    *,
    instruction: str | None = None,
    shots: Sequence[Shots] | None = None,
) -> TaskBatch:
    """Tokenise `(x, y)` pairs as format(x) ‖ y ‖ end-of-turn into one right-padded batch.

    `instruction` (a template with `{input}`) replaces the bare input when given; `shots` gives each
    pair its demonstrations. Only the answer and end-of-turn tokens carry labels. Prompt and answer
    are tokenised jointly and split at the prompt's length (`encode_example`).
    """
    rows = encode_pairs(model, pairs, instruction=instruction, shots=shots)
    return collate(rows, pad_id=pad_token_id(model), device=model.cfg.device)


def tokenize_task(model: TransformerBridge, task: Task, split: str = "train", instructed: bool = False) -> TaskBatch:
    """`tokenize_pairs` over one split of a task."""
    indices = task.split_indices(split)
    return tokenize_pairs(
        model,
        [task.pairs[i] for i in indices],
        instruction=task.instruction if instructed else None,
        shots=[task.demonstrations(i) for i in indices] if task.has_shots else None,
    )
