"""Greedy decoding with the KV cache that computes only what greedy decoding reads.

`TransformerBridge.generate` unembeds every prompt position in its first pass, although only the
last one is used, and keeps finished rows in the batch until the longest row stops. This loop
drives the bridge's own cached forward pass (`return_type="logits_and_cache"`, the Hugging Face
cache object) with the same attention masks and positions as `generate`, but
- asks the model for the last position's logits only (`logits_to_keep=1`) where the wrapped Hugging
  Face model accepts it, so the prompt pass unembeds one position per row, and
- keeps tokens and stop flags on the device, reads them back every few tokens
  (`native_options(check_every=...)`: one host synchronisation per check, not several per token)
  and then drops rows that emitted a stop token from the batch, the KV cache and the per-row masks.
Hooks (gates) fire on every pass as under `generate`; with the cache, later passes see one position.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import to_device
from .._distributed import all_agree
from ..data import collate
from ..gates import Gate, gate_hooks
from ..gates._fast._direct import direct_forward
from ..gates._native import decode_check_every, native_forward, prefix_sharing
from ..gates._paths import Decoding, gate_spec
from ..masks import HeadMask
from ..models import cut_at_stop, model_device, pad_token_id, unembed
from ..models._sharding import every_rank, lockstep
from ._answer import answer_nll

_UNEMBED_IN = "unembed.hook_in"


@dataclass
class GreedyOutput:
    """New tokens of every row (cut before its first stop token), the next-token logits at the
    last prompt position (`[batch, d_vocab]`, float32 on the CPU) and, when asked for, layer outputs
    at the last prompt position (`blocks.L.hook_attn_out`, `blocks.L.hook_resid_post`: `[batch,
    d_model]`, float32 on the CPU) and, when answers were given, each answer token's cross-entropy
    after the prompt (`[batch, longest answer]`, nats, float32 on the CPU, 0 after a row's answer)."""

    tokens: list[list[int]]
    first_logits: Float[Tensor, "batch d_vocab"]
    layers: dict[str, Tensor] | None = None
    answer_nll: Float[Tensor, "batch answer"] | None = None


def keeps_last_logits_only(model: TransformerBridge) -> bool:
    """Whether the wrapped model accepts `logits_to_keep` (then only the last position is unembedded)."""
    forward = getattr(getattr(model, "original_model", None), "forward", None)
    if forward is None:
        return False
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def _derives_positions(model: TransformerBridge) -> bool:
    # The bridge refuses mask-derived positions for models that own their position logic (mRoPE).
    accepts = getattr(model, "_accepts_derived_position_ids", None)
    return bool(accepts()) if callable(accepts) else True


def _per_row(mask: HeadMask | Tensor | None, batch: int) -> bool:
    return isinstance(mask, Tensor) and mask.ndim == 3 and mask.shape[0] == batch and batch > 1


@every_rank
def greedy_generate(
    model: TransformerBridge,
    ids: Int[Tensor, "batch pos"],
    attention_mask: Int[Tensor, "batch pos"] | None = None,
    *,
    max_new_tokens: int,
    stops: set[int],
    mask: HeadMask | Tensor | None = None,
    alpha: float = 0.0,
    gate: Gate = "value",
    prompt_hooks: list | None = None,
    record_layers: bool = False,
    on_pass: Callable[[], object] | None = None,
    answers: Sequence[list[int]] | None = None,
) -> GreedyOutput:
    """Greedy continuations of a (left-padded) batch under a gate, equal to `model.generate(...,
    do_sample=False)` cut at the first stop token.

    `mask` is shared (`HeadMask`, `[n_layers, n_heads]`) or per row `[batch, n_layers, n_heads]`;
    `prompt_hooks` are forward hooks active during the prompt pass only; `record_layers` keeps the
    attention and block outputs of every layer at the last prompt position (`GreedyOutput.layers`).
    `attention_mask` marks real prompt tokens (None: no padding); pass `ids` and the mask on the host
    (as `left_pad` makes them without a device) and they are copied over without waiting for the
    device. `on_pass` is called after every
    forward pass (the prompt pass, then one per new token: at most `max_new_tokens`, fewer when
    every row stops early), e.g. to move a progress bar. Under the value gate with no other
    hook, the model decodes through its native forward pass (`gates._native`, every architecture),
    and on a CPU a Llama-family model through its direct forward pass (`gates._fast._direct`), which
    computes rows with the same tokens and gates once; the result is the same (rounding aside:
    the fused attention kernel orders its float operations differently). `gates.direct_path(False)`
    turns both off.

    `answers` (one non-empty token list per row) are also scored under teacher forcing after each
    row's prompt (`GreedyOutput.answer_nll`): on the direct or native forward pass from the prompt
    pass's own keys and values (each prompt is computed once for both), through the bridge's hooks
    by a separate `answer_nll` pass. Equal to `answer_nll` of the rows (prompt without padding,
    answer), rounding aside.
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    device = model_device(model)
    batch = ids.shape[0]
    if answers is not None and (len(answers) != batch or not all(answers)):
        raise ValueError(f"answers must be {batch} non-empty token lists, one per row")
    if attention_mask is not None:
        if attention_mask.shape != ids.shape:
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} does not match ids {tuple(ids.shape)}")
        # An unpadded batch runs without a mask, as generate assumes. Seen on the host for free; on a
        # device it would be read back, so a mask of ones there stays (the same result).
        if attention_mask.device.type == "cpu" and bool(attention_mask.all()):
            attention_mask = None
        else:
            attention_mask = to_device(attention_mask, device)
    ids = to_device(ids, device)  # from the host without waiting for the device
    per_row = _per_row(mask, batch)
    if isinstance(mask, Tensor):
        mask = to_device(mask, device)
    stop_ids = torch.tensor(sorted(stops), dtype=torch.long, device=device)
    hooks = gate_hooks(model, mask, alpha=alpha, gate=gate)
    eligible, spec = gate_spec(hooks)
    # Rows sharing prefixes (the direct pass) win on a CPU; on a GPU the native pass, whose loop
    # reads the device back every few tokens only.
    direct = None
    if eligible and not prompt_hooks and prefix_sharing(device):
        direct = direct_forward(model)
    native = native_forward(model) if eligible and not prompt_hooks and direct is None else None
    if native is not None and record_layers and not native.records:
        native = None
    padded = None  # the answers for the direct or native pass, which score them after the prompt pass
    if answers is not None and (direct is not None or native is not None):
        width = max(len(a) for a in answers)
        padded = to_device(torch.tensor([a + [-1] * (width - len(a)) for a in answers]), device)
    job = Decoding(ids, attention_mask, spec, max_new_tokens, stop_ids, on_pass, answers=padded)
    if native is not None or direct is not None:
        if native is not None:
            tokens, first_logits, layers, states = native.greedy(job, record_layers=record_layers)
        else:
            assert direct is not None
            with torch.no_grad():
                tokens, first_logits, layers, states = direct.greedy(job, record_layers=record_layers)
        output = GreedyOutput(cut_at_stop(tokens, stops), first_logits, layers if record_layers else None)
        if answers is None:
            return output
        if padded is None:
            return _with_answer_nll(model, output, ids, attention_mask, answers, hooks)
        output.answer_nll = _scored(model, answers, first_logits, states)
        return output
    regate = None
    if per_row and isinstance(mask, Tensor):  # per-row masks are tensors: the rows left keep theirs
        regate = functools.partial(_row_hooks, model, mask, alpha, gate)
    new_tokens, first_logits, captured = _hooked_greedy(
        model, ids, attention_mask, hooks, prompt_hooks, record_layers, on_pass, max_new_tokens, stop_ids, regate
    )
    output = GreedyOutput(cut_at_stop(new_tokens, stops), first_logits, captured if record_layers else None)
    return output if answers is None else _with_answer_nll(model, output, ids, attention_mask, answers, hooks)


def _row_hooks(model: TransformerBridge, mask: Tensor, alpha: float, gate: Gate, rows: Tensor) -> list:
    """The gate's hooks for some rows of a per-row mask."""
    return gate_hooks(model, mask[rows], alpha=alpha, gate=gate)


def _hooked_greedy(
    model: TransformerBridge,
    ids: Int[Tensor, "batch pos"],
    attention_mask: Int[Tensor, "batch pos"] | None,
    hooks: list,
    prompt_hooks: list | None,
    record_layers: bool,
    on_pass: Callable[[], object] | None,
    max_new_tokens: int,
    stop_ids: Tensor,
    regate: Callable[[Tensor], list] | None,
) -> tuple[list[list[int]], Tensor, dict[str, Tensor]]:
    """`greedy_generate` through the bridge's hooks (the gate's `hooks`, and `prompt_hooks` on the
    prompt pass): (each row's new tokens, not yet cut at a stop, the prompt pass's last logits on the
    host, the recorded layers). Rows that stop leave the batch at the next check, with their cache and,
    under per-row masks, their gate's (`regate(rows left)` builds the hooks of the rows left)."""
    device, batch = model_device(model), ids.shape[0]
    keep_last = {"logits_to_keep": 1} if keeps_last_logits_only(model) else {}
    prompt_hooks = list(prompt_hooks or [])
    if keep_last and _UNEMBED_IN in model.hook_dict:
        # The kept position is a strided view of the prompt's hidden states; a non-contiguous 3-D
        # input makes the unembedding a batched matmul over a broadcast weight (measured 8x slower
        # than the 2-D matmul it becomes once contiguous).
        prompt_hooks.append((_UNEMBED_IN, lambda x, hook: x.contiguous()))
    captured: dict[str, Tensor] = {}
    if record_layers:
        prompt_hooks += _recording_hooks(model, captured)
    derive = _derives_positions(model)

    active = torch.arange(batch, device=device)  # original row of every row still in the batch
    tokens = torch.zeros(batch, max(1, max_new_tokens), dtype=torch.long, device=device)
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)
    check_every, taken = decode_check_every(), max_new_tokens
    together = lockstep(model)  # sharded: every rank must run as many passes
    gate_scope = contextlib.ExitStack()
    try:
        gate_scope.enter_context(model.hooks(fwd_hooks=hooks))
        with torch.no_grad():
            kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
            with model.hooks(fwd_hooks=prompt_hooks):
                logits, cache = model(ids, return_type="logits_and_cache", use_cache=True, **kwargs, **keep_last)
            first_logits = logits[:, -1].float().cpu()
            if on_pass is not None:
                on_pass()
            running, length = attention_mask, ids.shape[1]
            next_ids = logits[:, -1].argmax(-1)  # the first new token; later ones come from cached steps
            for step in range(max_new_tokens):
                if step:
                    logits, cache = model(
                        next_ids[:, None],
                        return_type="logits_and_cache",
                        past_key_values=cache,
                        use_cache=True,
                        **_cached_step_inputs(running, len(active), length, derive, device),
                        **keep_last,
                    )
                    next_ids = logits[:, -1].argmax(-1)
                    if on_pass is not None:
                        on_pass()
                # Tokens and stop flags stay on the device; rows that stopped run on until the next
                # check, and their extra tokens are cut at the stop token like every row's.
                tokens[active, step] = next_ids
                length += 1
                if running is not None:
                    running = torch.cat([running, running.new_ones(len(active), 1)], dim=1)
                stopped |= torch.isin(next_ids, stop_ids)
                if step == max_new_tokens - 1 or (step + 1) % check_every:
                    continue
                done = stopped.tolist()  # the one host synchronisation of these check_every tokens
                if all_agree(all(done), device) if together else all(done):
                    taken = step + 1
                    break
                # Finished rows leave the batch, its cache and its per-row masks (a sharded model's
                # rank whose rows all stopped runs on with them while another rank decodes).
                if any(done) and not all(done):
                    keep = torch.tensor([i for i, d in enumerate(done) if not d], device=device)
                    active, next_ids, stopped = active[keep], next_ids[keep], stopped[keep]
                    cache.batch_select_indices(keep)
                    if running is not None:
                        running = running[keep]
                    if regate is not None:
                        gate_scope.close()
                        gate_scope = contextlib.ExitStack()
                        gate_scope.enter_context(model.hooks(fwd_hooks=regate(active)))
    finally:
        gate_scope.close()
    new_tokens = tokens[:, :taken].tolist() if max_new_tokens else [[] for _ in range(batch)]
    return new_tokens, first_logits, captured


def _scored(
    model: TransformerBridge, answers: Sequence[list[int]], first_logits: Tensor, states: Tensor | None
) -> Tensor:
    """Each answer token's cross-entropy, `[batch, longest answer]` on the CPU: the first from the
    prompt pass's logits, the others from the final-norm outputs after the answer tokens before
    them (`NativeForward.greedy`), unembedded at those positions only."""
    width = max(len(a) for a in answers)
    nll = torch.zeros(len(answers), width)
    first = torch.tensor([a[0] for a in answers])
    nll[:, 0] = F.cross_entropy(first_logits, first, reduction="none")
    later = [(row, j) for row, a in enumerate(answers) for j in range(1, len(a))]
    if later and states is not None:
        rows, cols = (torch.tensor(x) for x in zip(*later))
        targets = torch.tensor([answers[r][j] for r, j in later])
        index = to_device(torch.stack([rows, cols - 1]), states.device)
        logits = unembed(model, states[index[0], index[1]]).float()
        nll[rows, cols] = F.cross_entropy(logits, targets.to(logits.device), reduction="none").cpu()
    return nll


def _with_answer_nll(
    model: TransformerBridge,
    output: GreedyOutput,
    ids: Tensor,
    attention_mask: Tensor | None,
    answers: Sequence[list[int]],
    hooks: list,
) -> GreedyOutput:
    """`output` with its answers scored by a separate pass over (prompt without padding, answer)."""
    prompts = ids.tolist()  # one read of the batch, not one per row
    if attention_mask is not None:
        real = attention_mask.tolist()
        prompts = [[t for t, keep in zip(row, flags) if keep] for row, flags in zip(prompts, real)]
    batch = collate(list(zip(prompts, [list(a) for a in answers])), pad_id=pad_token_id(model), device=ids.device)
    with torch.no_grad():
        nll, rows = answer_nll(model, batch, hooks)
    scores = torch.zeros(len(answers), max(len(a) for a in answers))
    cols = torch.cat([torch.arange(len(a)) for a in answers])
    scores[rows.cpu(), cols] = nll.float().cpu()
    output.answer_nll = scores
    return output


def _recording_hooks(model: TransformerBridge, captured: dict[str, Tensor]) -> list:
    """Hooks keeping every layer's attention and block output at the last position in `captured`."""

    def keep_last(name: str):
        # hook.name may be the canonical name behind an alias, so the key comes from here.
        def keep(x: Tensor, hook) -> None:
            captured[name] = x[:, -1].detach().float().cpu()

        return keep

    return [
        (name, keep_last(name))
        for layer in range(model.cfg.n_layers)
        for name in (f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_resid_post")
    ]


def _cached_step_inputs(running: Tensor | None, rows: int, length: int, derive: bool, device) -> dict:
    """What generate passes on a cached step: the whole running attention mask and the new token's
    position, read off the mask (left padding shifts positions per row)."""
    mask = running if running is not None else torch.ones(rows, length, dtype=torch.long, device=device)
    inputs = {"attention_mask": mask}
    if derive:
        inputs["position_ids"] = (mask.long().cumsum(-1) - 1)[:, -1:]
    return inputs
