"""One-by-one head removal (Fig. 2, 8, 9): ranks of tracked tokens and greedy continuations per step.

Step s removes the first s heads of `order` from the full model, so a sweep over N heads has N + 1
steps. The steps are independent forward passes, so they go on the batch dimension: row i of a chunk
carries step i's mask (per-row masks at `hook_z`), and all rows are generated greedily together with
the KV cache, unembedding only the last position and dropping rows at their stop token
(`greedy_generate`). `batch_size=1` is the plain sequential loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._distributed import all_min, gather, padded_share, rank_and_world, shard
from .._progress import progress as progress_bar
from ..masks import Head, HeadMask
from ..models import model_device, stop_token_ids
from ..models._sharding import every_rank, is_sharded, lockstep
from ..objective import greedy_generate
from ._common import Gate, check_heads, prompt_ids, prompt_text, target_ids, token_ranks, token_text
from ._config import SweepConfig, configured

_CPU_BUDGET_GB = 2.0


def step_or_never(step: int | float | None) -> int | str:
    """A sweep step for people to read: the step number, or "never" when the event did not happen
    (`switch_step` / `change_step` None, or NaN once stored in a table)."""
    if step is None or step != step:
        return "never"
    return int(step)


@dataclass
class RemovalSweep:
    """The result of `removal_sweep`.

    `ranks` / `logits` have one row per step (`step`, `n_removed`, the head removed at that step,
    the top-1 token) and one column per tracked token (labels in `tokens.label`). `generations[i]`
    is step i's greedy continuation, cut before the first end-of-sequence token. With
    `record_layers`, `attn_out` and `block_out` are `[steps, n_layers, d_model]` at the last prompt
    position (`blocks.L.hook_attn_out`, `blocks.L.hook_resid_post`).
    """

    prompt: str
    order: list[Head]
    steps: list[int]
    tokens: pd.DataFrame
    ranks: pd.DataFrame
    logits: pd.DataFrame
    generations: list[str]
    generation_ids: list[list[int]]
    attn_out: Tensor | None = None
    block_out: Tensor | None = None
    metadata: dict = field(default_factory=dict)

    @property
    def target_labels(self) -> list[str]:
        """Labels of the target tokens (the `ranks` / `logits` columns of `kind == "target"`)."""
        return self.tokens.loc[self.tokens.kind == "target", "label"].tolist()

    @property
    def top_labels(self) -> list[str]:
        """Labels of the full model's top-k tokens (the `ranks` / `logits` columns of `kind == "top"`)."""
        return self.tokens.loc[self.tokens.kind == "top", "label"].tolist()

    @property
    def switch_step(self) -> int | None:
        """First step at which a target token is the top-1 next token (None if never)."""
        labels = self.target_labels
        if not labels:
            return None
        hit = (self.ranks[labels] == 1).any(axis=1).to_numpy()
        return int(self.ranks.step.to_numpy()[hit.argmax()]) if hit.any() else None

    @property
    def change_step(self) -> int | None:
        """First step whose greedy continuation differs from the first step's (None if never)."""
        return next((s for s, ids in zip(self.steps, self.generation_ids) if ids != self.generation_ids[0]), None)

    def changes(self) -> pd.DataFrame:
        """The steps where the continuation differs from the step before (plus the first step)."""
        rows = [
            (step, self.generations[i])
            for i, step in enumerate(self.steps)
            if i == 0 or self.generation_ids[i] != self.generation_ids[i - 1]
        ]
        return pd.DataFrame(rows, columns=["step", "generation"])

    def long(self) -> pd.DataFrame:
        """Tidy table: one row per (step, tracked token) with rank and logit."""
        ranks = self.ranks.melt(
            id_vars=["step"], value_vars=self.tokens.label.tolist(), var_name="label", value_name="rank"
        )
        logits = self.logits.melt(
            id_vars=["step"], value_vars=self.tokens.label.tolist(), var_name="label", value_name="logit"
        )
        table = ranks.merge(logits, on=["step", "label"]).merge(self.tokens, on="label")
        return table.sort_values(["step", "label"], kind="stable").reset_index(drop=True)

    def mask_at(self, step: int, shape: tuple[int, int]) -> Tensor:
        """The `[n_layers, n_heads]` mask of a step."""
        return sweep_masks(self.order, [step], shape)[0]


def sweep_masks(order: Sequence[Head], steps: Sequence[int], shape: tuple[int, int]) -> Tensor:
    """`[len(steps), n_layers, n_heads]`: row i has the first `steps[i]` heads of `order` removed."""
    n_layers, n_heads = shape
    first: dict[tuple[int, int], int] = {}  # step at which each head goes (its first place in the order)
    for i, (layer, head) in enumerate(order):
        first.setdefault((layer, head), i + 1)
    removal_step = torch.full((n_layers, n_heads), len(order) + 1)
    if first:
        layers, heads = zip(*first)
        removal_step[list(layers), list(heads)] = torch.tensor(list(first.values()))
    steps_t = torch.as_tensor(list(steps))[:, None, None]
    return (removal_step[None] > steps_t).float()


def weight_order(mask: HeadMask) -> list[Head]:
    """The paper's order: every head by ascending weight sigmoid(M) (`HeadMask.removal_order`)."""
    return mask.removal_order()


def random_order(model_or_shape: TransformerBridge | tuple[int, int], seed: int = 0) -> list[Head]:
    """Every head in a random order (a baseline for the weight order)."""
    if isinstance(model_or_shape, tuple):
        n_layers, n_heads = model_or_shape
    else:
        n_layers, n_heads = model_or_shape.cfg.n_layers, model_or_shape.cfg.n_heads
    generator = torch.Generator().manual_seed(seed)
    return [divmod(int(i), n_heads) for i in torch.randperm(n_layers * n_heads, generator=generator)]


def influence_order(sweep: RemovalSweep, k: int | None = None, target: int | str | None = None) -> list[Head]:
    """Appendix C.3.1: the first `k` heads of a sweep re-ordered by how much removing each raised
    the target token's rank (largest rise first; ties keep the sweep's order), then the rest.

    `sweep` must cover steps 0..k contiguously; `target` picks a target column by index or label
    (default: the first target).
    """
    labels = sweep.target_labels
    if not labels:
        raise ValueError("influence order needs a sweep with target_tokens")
    if target is None:
        label = labels[0]
    elif isinstance(target, int):
        if not 0 <= target < len(labels):
            raise ValueError(f"target index {target} out of range for {len(labels)} targets")
        label = labels[target]
    elif target in labels:
        label = target
    else:
        raise ValueError(f"unknown target {target!r}; the sweep's targets are {labels}")
    k = len(sweep.order) if k is None else k
    if not 0 < k <= len(sweep.order):
        raise ValueError(f"k={k} must lie in 1..{len(sweep.order)} (the sweep's order length)")
    if sweep.steps[: k + 1] != list(range(k + 1)):
        raise ValueError(f"influence order needs the sweep's steps 0..{k} without gaps")
    ranks = sweep.ranks[label].to_numpy()[: k + 1].astype(np.int64)
    rise = ranks[:-1] - ranks[1:]  # > 0: the removal moved the target towards rank 1
    reordered = sorted(range(k), key=lambda i: (-rise[i], i))
    return [sweep.order[i] for i in reordered] + list(sweep.order[k:])


def auto_batch_size(model: TransformerBridge, n_tokens: int, memory_gb: float | None = None) -> int:
    """Rows per chunk that fit a memory budget (default: half the free GPU memory, 2 GiB on CPU).

    A row holds its KV cache over `n_tokens` positions (key/value heads only), the activations of
    one layer in the prompt pass (residual, q/k/v/z, MLP, eager attention scores and pattern) and
    the logits of one position (only the last position is unembedded); a factor of 1.5 covers
    temporaries. The former estimate (every position's logits, all query heads cached, factor 3)
    was about 10x larger at the Qwen2.5-0.5B shape and capped CPU chunks at 19 rows.
    """
    device = model_device(model)
    if memory_gb is None:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            budget = 0.5 * free
        else:
            budget = _CPU_BUDGET_GB * 2**30
    else:
        if memory_gb <= 0:
            raise ValueError(f"memory budget must be positive, got {memory_gb} GiB")
        budget = memory_gb * 2**30
    return max(1, int(budget // row_bytes(model, n_tokens)))


def row_bytes(model: TransformerBridge, n_tokens: int) -> int:
    """Estimated peak bytes one sweep row needs over a prompt and continuation of `n_tokens`."""
    cfg = model.cfg
    element = torch.finfo(cfg.dtype).bits // 8 if getattr(cfg, "dtype", None) is not None else 4
    n_kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    d_mlp = getattr(cfg, "d_mlp", None) or 4 * cfg.d_model
    kv_cache = cfg.n_layers * 2 * n_kv * cfg.d_head * n_tokens
    layer = n_tokens * (6 * cfg.d_model + 2 * (cfg.n_heads + n_kv) * cfg.d_head + 3 * d_mlp)
    attention = 3 * cfg.n_heads * n_tokens**2
    logits = cfg.d_vocab * (element + 4) // element  # one position, plus its float32 copy
    return int(1.5 * element * (kv_cache + layer + attention + logits))


def greedy_rows(
    model: TransformerBridge,
    ids: Tensor,
    masks: Tensor,
    max_new_tokens: int,
    record_layers: bool,
    on_pass: Callable[[], object] | None = None,
    *,
    gate: Gate = "value",
    alpha: float = 0.0,
) -> tuple[Tensor, list[list[int]], dict[str, Tensor]]:
    """One chunk: next-token logits at the last prompt position, the greedy continuation of every
    row (cut at the first stop token) and, optionally, layer outputs at the last prompt position.

    Only the last prompt position is unembedded, and rows leave the batch at their stop token
    (`greedy_generate`); the result equals `model.generate` row by row.
    """
    rows = masks.shape[0]
    batch = ids.expand(rows, -1).contiguous()
    out = greedy_generate(
        model,
        batch,
        max_new_tokens=max_new_tokens,
        stops=stop_token_ids(model),
        mask=masks,  # moved without waiting for the device
        alpha=alpha,
        gate=gate,
        record_layers=record_layers,
        on_pass=on_pass,
    )
    return out.first_logits, out.tokens, out.layers or {}


@every_rank
def removal_sweep(
    model: TransformerBridge,
    prompt: str,
    order: Sequence[Head] | HeadMask,
    config: SweepConfig | None = None,
    *,
    target_tokens: Sequence[int | str] | int | str | None = None,
    record_layers: bool = False,
    steps: Sequence[int] | None = None,
    formatted: bool = False,
    distributed: bool = False,
    progress: bool = True,
    **options: Any,
) -> RemovalSweep:
    """Remove heads one at a time in `order` and record what the model would say at each step.

    `config` (a `SweepConfig`; its fields may be given as keyword arguments instead, or on top:
    `top_k=3`) says what is tracked and how the steps are batched and gated.
    `prompt` is the user text, wrapped in the model's chat template unless `formatted=True`.
    `order` is a list of `(layer, head)` (see `weight_order`, `influence_order`, `random_order`),
    or a `HeadMask`, meaning its weight order. Tracked tokens: the full model's `top_k` next tokens
    and `target_tokens` (ids, or text whose first token is used). Each step records their rank
    (1 = top) and logit at the last prompt position and a greedy continuation of `max_new_tokens`
    tokens. `steps` restricts the sweep to some steps (default 0..len(order)). Steps run in chunks
    of `batch_size` rows (None: as many as fit `memory_gb`, see `auto_batch_size`).

    `distributed=True` splits the steps over the ranks of the initialised `torch.distributed`
    process group (each rank a contiguous slice, on its own `model`); every rank returns the whole
    sweep, equal to a single-process one; on a model loaded with `shard="fsdp"` the steps are always
    split so (every rank calls this). `progress=False` hides its progress bar.

    Removed heads go through `gate`: the value gate by default, which keeps a fraction `alpha` of
    a removed head's output (0: removed, the paper's sweep), or the query gate (`"query"`, alpha 0),
    under which a removed head attends uniformly.
    """
    config = configured(SweepConfig, config, options, "removal_sweep")
    top_k, max_new_tokens, batch_size, memory_gb = (
        config.top_k,
        config.max_new_tokens,
        config.batch_size,
        config.memory_gb,
    )
    gate, alpha = config.gate, config.alpha
    # A sharded model's ranks share every pass: its sweeps are always split over them.
    rank, world = rank_and_world(required=True) if distributed or is_sharded(model) else (0, 1)
    if isinstance(order, HeadMask):
        order.check_model(model)
    order = check_heads(model, order.removal_order() if isinstance(order, HeadMask) else list(order))
    if len(set(order)) != len(order):
        raise ValueError("the removal order lists a head twice")
    steps = list(range(len(order) + 1)) if steps is None else [int(s) for s in steps]
    if not steps or any(not 0 <= s <= len(order) for s in steps):
        raise ValueError(f"steps must be a non-empty list of values in 0..{len(order)}")
    if isinstance(target_tokens, (int, str)):
        target_tokens = [target_tokens]
    after = prompt_text(model, prompt, formatted=formatted)
    targets = target_ids(model, target_tokens or [], after=after)

    ids_list = prompt_ids(model, prompt, formatted=formatted)
    ids = torch.tensor([ids_list], device=model.cfg.device)
    rows: int = auto_batch_size(model, len(ids_list) + max_new_tokens, memory_gb) if batch_size is None else batch_size
    if lockstep(model):  # free memory differs between GPUs; the chunks of every rank may not
        rows = all_min(rows, model_device(model))
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    all_masks = sweep_masks(order, steps, shape)

    logits, continuations, layer_chunks = _run_steps(
        model, ids, all_masks, max_new_tokens, rows, record_layers, gate, alpha, rank, world, progress
    )

    # The full model's top-k: from step 0 when the sweep has it, else from an unmasked pass.
    if steps[0] == 0:
        reference = logits[0]
    else:
        reference, _, _ = greedy_rows(model, ids, torch.ones(1, *shape), 0, False)
        reference = reference[0]
    tracked, labels, tokens = _tracked_tokens(model, reference, top_k, targets)
    ranks, logit_table = _step_tables(model, order, steps, logits, tracked, labels)
    attn_out, block_out = _layer_outputs(layer_chunks, model.cfg.n_layers) if record_layers else (None, None)
    text = model.tokenizer.decode(ids_list)
    return RemovalSweep(
        prompt=text,
        order=order,
        steps=steps,
        tokens=tokens,
        ranks=ranks,
        logits=logit_table,
        generations=[model.tokenizer.decode(c) for c in continuations],
        generation_ids=continuations,
        attn_out=attn_out,
        block_out=block_out,
        metadata={"batch_size": rows, "max_new_tokens": max_new_tokens, "top_k": top_k, "gate": gate, "alpha": alpha},
    )


def _run_steps(
    model: TransformerBridge,
    ids: torch.Tensor,
    all_masks: torch.Tensor,
    max_new_tokens: int,
    rows: int,
    record_layers: bool,
    gate: str,
    alpha: float,
    rank: int,
    world: int,
    progress: bool,
) -> tuple[torch.Tensor, list[list[int]], list[dict[str, torch.Tensor]]]:
    """Every step's passes, in chunks of `rows` (each rank runs its share; with several, every rank gathers
    all): the last prompt position's logits per step, the greedy continuations, the recorded layers."""
    n_steps = len(all_masks)  # one mask per step
    # On a sharded model every rank runs as many rows (repeats of its last one, dropped after).
    mine, run = padded_share(n_steps, rank, world) if lockstep(model) else (shard(n_steps, rank, world), None)
    run = list(mine) if run is None else run
    logits_chunks, continuations, layer_chunks = [torch.empty(0, model.cfg.d_vocab)], [], []
    starts = range(0, len(run), rows)
    passes = max(1, max_new_tokens)  # forward passes per chunk: the prompt pass, then one per new token
    bar = progress_bar(
        total=len(starts) * passes,
        desc=f"removal sweep ({n_steps} steps)",
        unit="pass",
        enabled=progress and rank == 0,
    )
    for start in starts:
        done = [0]

        def step(done=done) -> None:
            done[0] += 1
            bar.update(1)

        logits, conts, captured = greedy_rows(
            model,
            ids,
            all_masks[run[start : start + rows]],
            max_new_tokens,
            record_layers,
            step,
            gate=gate,
            alpha=alpha,
        )
        bar.update(passes - done[0])  # a chunk whose rows all stopped early skips its last passes
        kept = max(0, min(rows, len(mine) - start))  # this rank's own steps in the chunk
        logits_chunks.append(logits[:kept])
        continuations += conts[:kept]
        layer_chunks.append({name: value[:kept] for name, value in captured.items()})
    bar.close()
    if world > 1:  # every rank assembles the same sweep from all slices, in step order
        pieces = gather((logits_chunks, continuations, layer_chunks))
        logits_chunks = [chunk for piece in pieces for chunk in piece[0]]
        continuations = [row for piece in pieces for row in piece[1]]
        layer_chunks = [chunk for piece in pieces for chunk in piece[2]]
    return torch.cat(logits_chunks), continuations, layer_chunks


def _tracked_tokens(
    model: TransformerBridge, reference: torch.Tensor, top_k: int, targets: list[int]
) -> tuple[list[int], list[str], pd.DataFrame]:
    """The tracked tokens (the full model's `top_k`, then the targets), their labels and their table."""
    top = reference.topk(min(top_k, reference.numel())).indices.tolist() if top_k else []
    tracked = top + targets
    kinds = ["top"] * len(top) + ["target"] * len(targets)
    labels = [
        f"top{i + 1} {token_text(model, t)!r}" if kind == "top" else f"target {token_text(model, t)!r}"
        for i, (t, kind) in enumerate(zip(tracked, kinds))
    ]
    labels = [lab if labels.count(lab) == 1 else f"{lab} #{i}" for i, lab in enumerate(labels)]
    tokens = pd.DataFrame(
        {
            "label": labels,
            "token_id": tracked,
            "text": [token_text(model, t) for t in tracked],
            "kind": kinds,
        }
    )
    return tracked, labels, tokens


def _step_tables(
    model: TransformerBridge,
    order: list[Head],
    steps: list[int],
    logits: torch.Tensor,
    tracked: list[int],
    labels: list[str],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ranks, logits): one row per step (the head removed, the top token), a column per tracked token."""
    frame = pd.DataFrame(
        {
            "step": steps,
            "n_removed": steps,
            "layer": pd.array([order[s - 1][0] if s else None for s in steps], dtype="Int64"),
            "head": pd.array([order[s - 1][1] if s else None for s in steps], dtype="Int64"),
            "top1_id": logits.argmax(-1).tolist(),
        }
    )
    frame["top1"] = [token_text(model, t) for t in frame.top1_id]
    ranks, logit_table = frame.copy(), frame.copy()
    if tracked:
        tracked_t = torch.tensor(tracked)
        rank_values = token_ranks(logits, tracked_t).numpy()
        logit_values = logits[:, tracked_t].numpy()
        for j, label in enumerate(labels):
            ranks[label] = rank_values[:, j]
            logit_table[label] = logit_values[:, j]
    return ranks, logit_table


def _layer_outputs(layer_chunks: list[dict[str, torch.Tensor]], n_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention output, block output) per step and layer, from the chunks' recorded hooks."""
    attn_out = torch.stack(
        [torch.cat([c[f"blocks.{l}.hook_attn_out"] for c in layer_chunks]) for l in range(n_layers)], dim=1
    )
    block_out = torch.stack(
        [torch.cat([c[f"blocks.{l}.hook_resid_post"] for c in layer_chunks]) for l in range(n_layers)], dim=1
    )
    return attn_out, block_out
