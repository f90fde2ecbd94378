"""The training objective: cross-entropy on answer tokens, unembedding only the answer positions."""

from __future__ import annotations

import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from ..data import TaskBatch, length_groups
from ..data._tokenize import answer_positions as answer_positions  # public here too
from ..gates._native import native_forward
from ..gates._paths import gate_spec
from ..models import FINAL_NORM_OUT, model_device, unembed, verify_readout
from ..models._sharding import every_rank


def length_batches(
    model: TransformerBridge, rows: list[tuple[list[int], list[int]]], max_rows: int | None = None
) -> list[list[int]]:
    """Indices of encoded (prompt, answer) rows grouped into passes that pad little (`length_groups`).

    On a CPU a pass costs roughly 1e7 / d_model^2 tokens of fixed work (an estimate: ~30 tokens on
    SmolLM2-135M; on the tiny organism it errs towards fewer passes), so rows of very different
    lengths (news articles) run in several passes. On a GPU the fixed cost dominates: as few passes
    as `max_rows` allows, split where the lengths differ most.
    """
    lengths = [len(prompt) + len(answer) for prompt, answer in rows]
    on_cpu = model_device(model).type == "cpu"
    overhead = max(8.0, 1e7 / model.cfg.d_model**2) if on_cpu else 1e6
    return length_groups(lengths, overhead=overhead, max_rows=max_rows)


class _StopForward(Exception):
    """Raised from the final-norm hook: everything after it (the full unembedding) is skipped."""


@every_rank
def answer_logits(
    model: TransformerBridge, batch: TaskBatch, hooks: list | None = None, *, checkpoint: bool = False
) -> tuple[Float[Tensor, "n d_vocab"], Tensor, Tensor]:
    """Logits at the positions that predict answer tokens, their targets and batch rows.

    The forward pass stops after the final norm (`ln_final.hook_out`, its weight applied); only the
    answer positions go through the unembedding (for a 0.5B model the unembedding is over a quarter
    of the parameters). The result equals `model(...)` logits at those positions. Hooks that
    are active on `model` (gates) apply as usual; `hooks` are added for this pass only (one
    `model.hooks` context per step: entering it costs a few milliseconds on the bridge).

    When `hooks` are a value gate (`gate_hooks`) or none and no other hook is active, the model
    runs its native forward pass (`gates._native`: its own Hugging Face modules, the gate at the
    output projection's input), equal to the bridge's. `checkpoint=True` recomputes each layer in
    the backward pass instead of keeping its activations (less memory, about one more forward pass);
    it needs the native forward pass.
    """
    rows, positions, targets = batch.answers()
    verify_readout(model)
    eligible, spec = gate_spec(hooks)
    native = native_forward(model) if eligible else None
    if native is not None:
        return unembed(model, native.final_normed(batch, spec, checkpoint=checkpoint)), targets, rows
    if checkpoint:
        raise ValueError(
            "activation checkpointing needs the native forward pass: the value gate with no other hook "
            "attached to the model"
        )
    hooks = list(hooks or [])
    captured: list[Tensor] = []

    def stop(normalized: Tensor, hook) -> Tensor:
        captured.append(normalized)
        raise _StopForward

    try:
        with model.hooks(fwd_hooks=[*hooks, (FINAL_NORM_OUT, stop)]):
            model(batch.input_ids, attention_mask=batch.attention_mask)
    except _StopForward:
        pass
    if not captured:
        raise RuntimeError(f"the forward pass never reached {FINAL_NORM_OUT}")
    return unembed(model, captured[0][rows, positions]), targets, rows


@every_rank
def answer_nll(
    model: TransformerBridge, batch: TaskBatch, hooks: list | None = None, *, checkpoint: bool = False
) -> tuple[Float[Tensor, " n"], Tensor]:
    """Per-answer-token negative log-likelihood (nats) and the batch row of each token
    (`checkpoint`: see `answer_logits`)."""
    logits, targets, rows = answer_logits(model, batch, hooks, checkpoint=checkpoint)
    return F.cross_entropy(logits.float(), targets, reduction="none"), rows
