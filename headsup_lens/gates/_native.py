"""The value gate on the wrapped Hugging Face model's own forward pass, for every architecture.

The bridge replaces the Hugging Face model's submodules by components with hook points and
computes attention eagerly so that `hook_attn_scores` and `hook_pattern` can be read. The value
gate needs neither: it scales each head's output before `W_O`, and `hook_z` is the input of the
output projection (`o_proj`, GPT-2's `c_proj`). When no hook is active on the model, losses and
greedy decoding run the Hugging Face model itself instead:
- for the duration of a call, every bridge component in the model's module tree is swapped back
  for the module it wraps, and a forward pre-hook on each layer's output projection multiplies
  head h's slice of its input by the gate (per-row gates `[batch, n_layers, n_heads]`, mean
  ablation, MLP-output gates by a forward hook on the MLP);
- attention runs through the model's own attention interface, with fused attention (SDPA) where
  the model supports it, and its own KV cache (a static cache on request);
- greedy decoding keeps tokens and stop flags on the device and reads them back every
  `check_every` tokens (one host synchronisation per check instead of several per token); on a GPU
  it runs at fixed shapes and replays each token's step as one captured CUDA graph (`gates._static`);
- a loss pass over right-padded rows (no KV cache) runs SDPA under `CAUSAL_ATTENTION`, an attention
  function registered with transformers but given no mask function: transformers then prepares no
  mask, and its check for packed sequences (one host synchronisation per pass) is skipped. Causal
  attention, banded by the layer's sliding window where it has one, is all such a pass needs. On the
  CPU the rows are packed into one sequence first (`gates._packed`, `PACKED_ATTENTION`). Either way
  the last layer's output projection and MLP compute the answer positions only (`last_layer_at`).
  With activation checkpointing each decoder layer keeps its input only and runs again in the
  backward pass, inside the same gates, attention function, packing and cut (`_recomputed`).
The gate is the same function of the same weights as at `hook_z`; tests compare both paths on
every architecture family the gates support.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.utils.checkpoint import checkpoint as _checkpoint
from transformer_lens.model_bridge import TransformerBridge
from transformers import DynamicCache

from .._distributed import all_agree
from .._typecheck import checked
from .._warnings import warn
from ..data import TaskBatch
from ..models._sharding import is_sharded, lockstep
from ._attention import CAUSAL_ATTENTION, PACKED_ATTENTION, current_unpacking, mask_free_refusal, unpacking
from ._packed import given_packing, packing, token_gates
from ._paths import (
    Decoding,
    GateSpec,
    cached_forward,
    check_rows,
    module_hooks,
    prompt_positions,
    raw_module,
    uncaptured,
)
from ._static import Decodings, StaticDecoding, answer_states, cache_slots, decoding_key, fits, static_step

_CACHE_ATTR = "_headsup_native_forward"
# Options of the native path (process-wide): fused attention, fixed-shape decoding on a static KV cache
# (replayed as a CUDA graph on a GPU, or compiled), how often the stop flags are read, prefix sharing,
# packed loss passes.
_OPTIONS: dict = {
    "sdpa": True,
    "static_cache": False,
    "cuda_graph": None,
    "compile": False,
    "check_every": 4,
    "prefix_sharing": None,
    "pack_rows": None,
}


@contextlib.contextmanager
def native_options(
    *,
    sdpa: bool | None = None,
    static_cache: bool | None = None,
    cuda_graph: bool | None = None,
    compile: bool | None = None,
    check_every: int | None = None,
    prefix_sharing: bool | None = None,
    pack_rows: bool | None = None,
) -> Iterator[None]:
    """Options of the native forward pass inside the block (None: unchanged).

    `sdpa`: fused attention (`scaled_dot_product_attention`) where the model supports it, else its
    configured attention (default on); `static_cache`: greedy decoding at fixed shapes, on a
    preallocated KV cache (`gates._static`; default off on the CPU, where it saves nothing);
    `cuda_graph`: on a GPU, decode at fixed shapes and replay each token's step as one captured CUDA
    graph (default on for a model on a GPU; falls back to eager steps, with a warning, when the
    capture fails); `compile`: `torch.compile` the fixed-shape decoding step (default off: it
    compiles for minutes; falls back to eager when compilation fails); `check_every`: greedy decoding reads
    the stop flags back every N tokens (default 4); `prefix_sharing`: greedy decoding of a
    Llama-family model runs the direct forward pass, which computes rows with the same tokens and
    gates below a layer once (`gates._fast._direct`; it reads the row groups back on every pass, so it
    pays on a CPU only: the default is on for a model on the CPU, off on a GPU); `pack_rows`: a loss
    pass over right-padded rows runs as one packed sequence (`gates._packed`: the projections and
    MLPs compute no padding and no final tokens; its layout is built on the host, so a GPU
    waits for nothing; the default is on for a model on the CPU, off on a GPU until the GPU
    benchmark shows it wins there; True also packs mask training's captured step to a token budget,
    `training._graphed`). Fixed-shape decodings keep their buffers and captured step per bucket
    across calls (`gates._static.Decodings`)."""
    if check_every is not None and check_every < 1:
        raise ValueError(f"check_every must be >= 1, got {check_every}")
    previous = dict(_OPTIONS)
    given = {
        "sdpa": sdpa,
        "static_cache": static_cache,
        "cuda_graph": cuda_graph,
        "compile": compile,
        "check_every": check_every,
        "prefix_sharing": prefix_sharing,
        "pack_rows": pack_rows,
    }
    _OPTIONS.update({k: v for k, v in given.items() if v is not None})
    try:
        yield
    finally:
        _OPTIONS.clear()
        _OPTIONS.update(previous)


def _swaps(root: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module, torch.nn.Module]]:
    """`(parent, name, component, wrapped)` for every bridge component under `root`: the module
    tree of the Hugging Face model once each component is replaced by the module it wraps."""
    found = []
    stack: list[Any] = [root]
    while stack:
        parent = stack.pop()
        for name, child in list(parent._modules.items()):
            if child is None:
                continue
            raw = raw_module(child)
            if raw is not child:
                found.append((parent, name, child, raw))
            stack.append(raw)
    return found


@checked
class NativeForward:
    """The wrapped Hugging Face model's forward pass, gated at each output projection's input."""

    def __init__(self, model: TransformerBridge, layers: list, attentions: list, projections: list, mlps: list) -> None:
        self.model = model
        self.hf: Any = model.original_model
        self.swaps, self.attentions, self.projections, self.mlps = _swaps(self.hf), attentions, projections, mlps
        self.records = all(isinstance(a, torch.nn.Module) for a in attentions)  # see `recording`
        self.layers = layers  # the decoder layers (Hugging Face modules), and the swaps inside each
        self.layer_swaps = [_swaps(layer) for layer in layers]
        self.n_heads = model.cfg.n_heads
        self.configs = {id(c): c for c in [self.hf.config, *self._attention_configs()]}.values()
        # Why a loss pass must keep its attention mask (chunked or bidirectional attention), or None: the
        # mask-free attention functions would drop what the mask says (`mask_free_refusal`).
        attention_modules = [m for m in self.hf.modules() if hasattr(m, "is_causal")]
        self.refusal = next(filter(None, map(mask_free_refusal, [self.hf, *attention_modules])), None)
        self.bidirectional = self.refusal is not None and "bidirectional" in self.refusal
        self.spec: GateSpec | None = None
        self.per_token = False
        self.attention = "sdpa"
        self.cut: Tensor | None = None  # the tokens of `last_layer_at`, inside its block
        self._depth = 0  # `running` blocks entered now
        self._compiled: Callable | Literal[False] | None = None
        self.decodings = Decodings(self.hf)  # fixed-shape decodings kept for reuse (`_greedy_static`)

    @property
    def supports_sdpa(self) -> bool:
        """Whether attention runs through SDPA (`native_options(sdpa=...)` and the model supports it):
        the condition for `CAUSAL_ATTENTION` and `PACKED_ATTENTION`."""
        return bool(_OPTIONS["sdpa"] and getattr(self.hf, "_supports_sdpa", False))

    def _attention_configs(self) -> list:
        return [
            m.config
            for _, _, _, raw in self.swaps
            for m in [raw]
            if hasattr(m, "config") and hasattr(m.config, "_attn_implementation")
        ]

    # ------------------------------------------------------------------ the gate
    def _projection_hook(self, layer: int):
        def hook(module, args):
            spec = self.spec
            if spec is None or spec.heads is None:
                return None
            x = args[0]
            z = x.unflatten(-1, (self.n_heads, -1))
            e = spec.heads[:, layer].to(device=x.device, dtype=x.dtype)
            e = e[None, :, :, None] if self.per_token else e[:, None, :, None]  # [batch or 1, pos or 1, n_heads, 1]
            gated = z * e if spec.mean is None else z * e + (1.0 - e) * spec.mean[layer].to(x.device, x.dtype)
            return (gated.flatten(-2), *args[1:])

        return hook

    def _mlp_hook(self, layer: int):
        def hook(module, args, output):
            spec = self.spec
            if spec is None or spec.mlp is None:
                return None
            scale = spec.mlp[:, layer]
            scale = scale[None, :, None] if self.per_token else scale[:, None, None]
            if isinstance(output, tuple):
                return (output[0] * scale.to(output[0].device, output[0].dtype), *output[1:])
            return output * scale.to(output.device, output.dtype)

        return hook

    @contextlib.contextmanager
    def running(
        self, spec: GateSpec | None, *, attention: str = "sdpa", per_token: bool = False, checkpoint: bool = False
    ) -> Iterator[Any]:
        """The Hugging Face model with its own modules and the gate `spec` in place, inside the block
        (`attention`: the attention function where the model supports SDPA, e.g. `CAUSAL_ATTENTION`
        for a pass over right-padded rows without a cache; `per_token`: the gates' rows are the tokens
        of one packed sequence, `gates._packed`; `checkpoint`: every layer keeps only its input for the
        backward pass, which runs it again, `_recomputed`)."""
        with self._gated(range(len(self.projections)), self.swaps, spec, attention, per_token):
            if not checkpoint:
                yield self.hf
                return
            # A layer's own `forward` attribute (a wrapper another library installed) is kept and restored.
            installed = [layer.__dict__.get("forward") for layer in self.layers]
            for index, layer in enumerate(self.layers):
                layer.forward = self._checkpointed(index)
            try:
                yield self.hf
            finally:
                for layer, previous in zip(self.layers, installed):
                    if previous is None:
                        del layer.__dict__["forward"]
                    else:
                        layer.forward = previous

    @contextlib.contextmanager
    def _gated(
        self, layers: range, swaps: list, spec: GateSpec | None, attention: str, per_token: bool
    ) -> Iterator[None]:
        """`swaps` made, the gate `spec` on `layers`' output projections (and MLPs), and `attention`
        set, inside the block."""
        handles = [self.projections[i].register_forward_pre_hook(self._projection_hook(i)) for i in layers]
        if spec is not None and spec.mlp is not None:
            handles += [self.mlps[i].register_forward_hook(self._mlp_hook(i)) for i in layers]
        configured = [c._attn_implementation for c in self.configs]
        previous = self.spec, self.per_token, self.attention
        self.spec, self.per_token, self.attention = spec, per_token, attention
        self._depth += 1
        try:
            for parent, name, _, raw in swaps:
                parent._modules[name] = raw
            if self.supports_sdpa:
                for c in self.configs:
                    c._attn_implementation = attention
            yield
        finally:
            self._depth -= 1
            self.spec, self.per_token, self.attention = previous
            for c, value in zip(self.configs, configured):
                c._attn_implementation = value
            for parent, name, component, _ in reversed(swaps):
                parent._modules[name] = component
            for handle in handles:
                handle.remove()

    # ------------------------------------------------------------------ activation checkpointing
    def _checkpointed(self, index: int) -> Callable:
        """Layer `index`'s forward under activation checkpointing (while gradients are recorded)."""
        layer = self.layers[index]
        forward = layer.forward
        last = index == len(self.layers) - 1

        def run(*args, **kwargs):
            if not torch.is_grad_enabled():
                return forward(*args, **kwargs)
            state = (self.spec, self.per_token, self.attention, current_unpacking(), self.cut if last else None)
            # A model in eval mode (as loaded) draws no random numbers: no generator state to keep.
            keep_rng = layer.training
            return _checkpoint(
                self._recomputed,
                index,
                forward,
                state,
                *args,
                use_reentrant=False,
                preserve_rng_state=keep_rng,
                **kwargs,
            )

        return run

    def _recomputed(self, index: int, forward: Callable, state: tuple, *args, **kwargs):
        """A checkpointed layer's forward. In the pass, as it is. In the backward pass, which runs it
        again after `running` has ended, inside the same gate, attention function, packing and (the
        last layer) cut: the layer's own modules swapped in and its gates hooked for the call."""
        spec, per_token, attention, unpack, cut = state
        if self._depth:
            if self.spec is not spec or self.per_token != per_token or self.attention != attention:
                raise RuntimeError(
                    "the backward pass of an activation-checkpointed pass ran inside another gated pass; "
                    "call backward after the pass's block has ended"
                )
            return forward(*args, **kwargs)
        with (
            self._gated(range(index, index + 1), self.layer_swaps[index], spec, attention, per_token),
            unpacking(*unpack) if unpack is not None else contextlib.nullcontext(),
            self.last_layer_at(cut) if cut is not None else contextlib.nullcontext(),
        ):
            return forward(*args, **kwargs)

    def select_rows(self, keep: Tensor) -> None:
        """Keep per-row gates of rows `keep` (rows leaving a greedy batch)."""
        spec = self.spec
        if spec is None:
            return
        heads = spec.heads if spec.heads is None or spec.heads.shape[0] == 1 else spec.heads[keep]
        mlp = spec.mlp if spec.mlp is None or spec.mlp.shape[0] == 1 else spec.mlp[keep]
        self.spec = GateSpec(heads=heads, mean=spec.mean, mlp=mlp)

    @contextlib.contextmanager
    def last_layer_at(self, tokens: Int[Tensor, " n"]) -> Iterator[None]:
        """Inside the block, the last layer's output projection and MLP compute only `tokens` (indices
        into the pass's tokens, flattened over batch and position); the other tokens get zeros there.
        A loss reads the final residual at the answer positions only, and the last layer's other
        tokens feed nothing but its keys and values, which come before both: those outputs are never
        read, and these two modules are most of a layer's work (both ways, in a training step)."""
        shapes: list[torch.Size] = []

        def take(module, args):
            shapes.append(args[0].shape)
            return (args[0].flatten(0, -2)[tokens][None], *args[1:])

        def put(module, args, output):
            first = output[0] if isinstance(output, tuple) else output
            shape = shapes.pop()
            full = first.new_zeros(shape[:-1].numel(), first.shape[-1]).index_copy(0, tokens, first[0])
            full = full.view(*shape[:-1], first.shape[-1])
            return (full, *output[1:]) if isinstance(output, tuple) else full

        handles = []
        for module in (self.projections[-1], self.mlps[-1]):
            # after the gate's input hook, before an MLP gate's output hook (both see every token)
            handles += [module.register_forward_pre_hook(take), module.register_forward_hook(put, prepend=True)]
        previous, self.cut = self.cut, tokens
        try:
            yield
        finally:
            self.cut = previous
            for handle in handles:
                handle.remove()

    @contextlib.contextmanager
    def recording(self, into: dict[str, Tensor]) -> Iterator[None]:
        """Inside the block, a pass records every layer's attention output (`blocks.L.hook_attn_out`:
        what the module its alias names returns, see `_aliased`) and block output (`blocks.L.hook_resid_post`) at its last
        position; when the block ends they go into `into` (`[batch, d_model]`, float32, on the CPU:
        one read back for every layer)."""
        kept: dict[str, Tensor] = {}

        def keep(name: str):
            def hook(module, args, output):
                first = output[0] if isinstance(output, tuple) else output
                kept[name] = first[:, -1].clone()  # not a view: the pass's full output is freed

            return hook

        if not self.records:
            raise RuntimeError("this model's blocks name no module for hook_attn_out: the bridge records its layers")
        handles = []
        for i, (attention, layer) in enumerate(zip(self.attentions, self.layers)):
            handles.append(attention.register_forward_hook(keep(f"blocks.{i}.hook_attn_out")))
            handles.append(layer.register_forward_hook(keep(f"blocks.{i}.hook_resid_post")))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        if kept:
            stacked = torch.stack([value.float() for value in kept.values()]).cpu()
            into.update(zip(kept, stacked.unbind(0)))

    # ------------------------------------------------------------------ losses
    def final_normed(
        self, batch: TaskBatch, spec: GateSpec | None, *, checkpoint: bool = False
    ) -> Float[Tensor, "n d_model"]:
        """The final norm's output at the batch's answer positions (`TaskBatch.answers`) of a gated
        pass, differentiable in the gate. A right-padded batch (`TaskBatch.right_padded`) runs as one
        packed sequence on the CPU (`gates._packed`: no padding, no final tokens), else without its
        attention mask under `CAUSAL_ATTENTION` (the same result, and nothing read back); inside a
        `gates._packed.packed_as` block it runs packed as the layout given there. `checkpoint=True` keeps only each layer's input for the backward pass and runs the layer again
        there (activation checkpointing: less memory for about one more forward pass)."""
        ids, rows, positions = batch.input_ids, *batch.answers()[:2]
        # Right padding makes the mask redundant under causal attention; chunked or bidirectional
        # attention needs it (transformers builds those masks).
        attention_mask = None if batch.right_padded() and self.refusal is None else batch.attention_mask
        check_rows(spec, ids.shape[0])
        given = given_packing()
        if given is not None or (attention_mask is None and pack_rows(ids.device) and self.supports_sdpa):
            layout, n_rows, width = given or (packing(batch), *ids.shape)
            gates = token_gates(spec, layout.rows)
            with (
                self.running(gates, attention=PACKED_ATTENTION, per_token=True, checkpoint=checkpoint) as hf,
                unpacking(layout.slots, n_rows, width),
                self.last_layer_at(layout.answers),
            ):
                packed = hf.base_model(input_ids=layout.ids, position_ids=layout.positions, use_cache=False)
            return packed.last_hidden_state[0, layout.answers]
        with (
            self.running(
                spec, attention=CAUSAL_ATTENTION if attention_mask is None else "sdpa", checkpoint=checkpoint
            ) as hf,
            self.last_layer_at(rows * ids.shape[1] + positions),
        ):
            hidden = hf.base_model(
                input_ids=ids,
                attention_mask=attention_mask,
                position_ids=prompt_positions(attention_mask, ids),
                use_cache=False,
            ).last_hidden_state
        return hidden[rows, positions]

    # ------------------------------------------------------------------ greedy decoding
    def _step(self, hf, ids, cache, attention, positions):
        return hf(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]

    def _static_step(self) -> Callable | None:
        """The fixed-shape decoding step compiled when asked for (`compile`), else None (eager);
        a failed compilation warns and leaves decoding eager."""
        if not _OPTIONS["compile"] or self._compiled is False:
            return None
        if self._compiled is None:
            self._compiled = torch.compile(static_step, dynamic=False)
        compiled = self._compiled

        def step(*args):
            if self._compiled is False:  # failed once: every later step runs eagerly
                return static_step(*args)
            try:
                return compiled(*args)
            except Exception as error:  # compilers fail in many ways; eager computes the same
                warn(f"the compiled decoding step failed ({type(error).__name__}); decoding eagerly", RuntimeWarning)
                self._compiled = False
                return static_step(*args)

        return step

    def _greedy_static(self, job: Decoding, record_layers: bool) -> tuple[list[list[int]], Tensor, dict, Tensor | None]:
        """`greedy` at fixed shapes (`gates._static`): a static KV cache, rows that stop stay in the
        batch, and on a GPU every token after the second replays one captured CUDA graph. The buffers
        and the graph are kept per bucket (`Decodings`): the chunks of an evaluation, or the calls
        of a notebook, capture once."""
        ids, attention_mask = job.ids, job.attention_mask
        graph = captures_decoding(ids.device)
        if graph:
            hooked = module_hooks(self.model).elsewhere()
            if hooked:
                warn(uncaptured(hooked, "decoding step", "decoding with eager steps"), RuntimeWarning)
                graph = False
        step_fn = self._static_step()
        key = decoding_key(job, graph, step_fn is not None)
        decoding = self.decodings.get(key, lambda: StaticDecoding(self.hf, job, graph, step_fn))
        decoding.load(job)
        recorded: dict[str, Tensor] = {}
        with torch.no_grad(), self.running(decoding.spec):
            with self.recording(recorded) if record_layers else contextlib.nullcontext():
                logits = decoding.prompt(ids, prompt_positions(attention_mask, ids))
            first_logits = logits.float()  # read back once, after decoding: the host queues on
            if job.on_pass is not None:
                job.on_pass()
            next_position = _next_positions(attention_mask, ids)
            answered = None if job.answers is None else decoding.answer_states(job.answers, next_position)
            if job.max_new_tokens == 0:
                return [[] for _ in range(ids.shape[0])], first_logits.cpu(), recorded, answered
            tokens, taken = decoding.decode(
                logits.argmax(-1), next_position, job.max_new_tokens, decode_check_every(), job.on_pass
            )
            new = tokens[:, :taken].tolist()
        return new, first_logits.cpu(), recorded, answered

    def greedy(
        self, job: Decoding, *, record_layers: bool = False
    ) -> tuple[list[list[int]], Tensor, dict[str, Tensor], Tensor | None]:
        """Greedy continuations (uncut: cut them at the first stop token), the next-token logits
        at the last prompt position (`[batch, d_vocab]`, float32, CPU), with `record_layers` every
        layer's attention and block output at the last prompt position (`recording`; else empty)
        and, when `job.answers` is given, the final norm's output after each answer token but the
        last (`[batch, answer - 1, d_model]`, differentiable in nothing): with the first logits,
        what scores the answers.

        Tokens and stop flags stay on the device; every `check_every` tokens the flags are read
        back once: the loop ends when every row has stopped, and stopped rows leave the batch, its
        cache and its per-row gates. At fixed shapes (`fixed_shapes`: on a GPU by default) they stay
        and every step is the same (`_greedy_static`). The answers run on a copy of the prompt pass's
        cache, so a prompt is computed once for its generation and its answer's loss."""
        check_rows(job.spec, job.ids.shape[0])
        together = lockstep(self.model)  # sharded: every rank must run as many passes
        sharded = is_sharded(self.model)
        if sharded and (_OPTIONS["static_cache"] or _OPTIONS["compile"]):
            warn(
                "native_options(static_cache=..., compile=...) do not apply to a model sharded with FSDP (a "
                "captured or compiled step cannot hold its weight gathers): decoding runs eagerly",
                RuntimeWarning,
            )
        if (
            fixed_shapes(job.ids.device)
            and not sharded
            and fits(self.configs, cache_slots(job))
            and not self.bidirectional
        ):
            return self._greedy_static(job, record_layers)
        ids, attention_mask, spec, stop_ids = job.ids, job.attention_mask, job.spec, job.stop_ids
        max_new_tokens, on_pass = job.max_new_tokens, job.on_pass
        device = ids.device
        batch, length = ids.shape
        check_every = decode_check_every()
        tokens = torch.zeros(batch, max(1, max_new_tokens), dtype=torch.long, device=device)
        full = None  # the attention mask over prompt and new tokens, filled once
        if attention_mask is not None:
            full = torch.cat([attention_mask.long(), attention_mask.new_ones(batch, max_new_tokens).long()], dim=1)
        cache = DynamicCache(config=self.hf.config)
        recorded: dict[str, Tensor] = {}
        with torch.no_grad(), self.running(spec) as hf:
            with self.recording(recorded) if record_layers else contextlib.nullcontext():
                logits = self._step(hf, ids, cache, attention_mask, prompt_positions(attention_mask, ids))
            first_logits = logits.float()  # read back once, after decoding: the host queues on
            if on_pass is not None:
                on_pass()
            next_position = _next_positions(attention_mask, ids)
            answered = None if job.answers is None else self._answer_states(hf, job, cache, next_position)
            if max_new_tokens == 0:
                return [[] for _ in range(batch)], first_logits.cpu(), recorded, answered
            rows = torch.arange(batch, device=device)  # the original row of every row still in the batch
            stopped = torch.zeros(batch, dtype=torch.bool, device=device)
            next_ids = logits.argmax(-1)
            taken = max_new_tokens
            for step in range(max_new_tokens):
                if step:
                    attention = None if full is None else full[:, : length + step]
                    next_ids = self._step(hf, next_ids[:, None], cache, attention, next_position).argmax(-1)
                    next_position = next_position + 1
                    if on_pass is not None:
                        on_pass()
                tokens[rows, step] = next_ids
                stopped |= torch.isin(next_ids, stop_ids)
                if step == max_new_tokens - 1:
                    break
                if (step + 1) % check_every == 0:
                    done = stopped.tolist()  # the one host synchronisation of these check_every tokens
                    if all_agree(all(done), device) if together else all(done):
                        taken = step + 1
                        break
                    if any(done) and not all(done):  # a rank whose rows all stopped runs on with them
                        keep = torch.tensor([i for i, d in enumerate(done) if not d], device=device)
                        cache.batch_select_indices(keep)
                        rows, next_ids, stopped = rows[keep], next_ids[keep], stopped[keep]
                        next_position = next_position[keep]
                        full = None if full is None else full[keep]
                        self.select_rows(keep)
        return tokens[:, :taken].tolist(), first_logits.cpu(), recorded, answered

    def _answer_states(self, hf, job: Decoding, cache, next_position: Tensor) -> Tensor | None:
        """`answer_states` on a copy of the prompt pass's dynamic cache (the prompt's 2-D mask, extended)."""
        assert job.answers is not None
        attention = job.attention_mask

        def mask(n: int) -> Tensor | None:
            return None if attention is None else torch.cat([attention, attention.new_ones(attention.shape[0], n)], 1)

        return answer_states(hf, job.answers, cache, next_position, mask)


def _aliased(block: torch.nn.Module, name: str) -> torch.nn.Module | None:
    """The Hugging Face module whose output a bridge block's hook `name` sees (its alias names a
    component's `hook_out`: `hook_attn_out` is the attention's output, or on Gemma-3 the norm after
    it), or None."""
    target = getattr(block, "hook_aliases", {}).get(name, "")
    path, _, hook = target.rpartition(".")
    if hook != "hook_out":
        return None
    module: Any = block
    for part in path.split(".") if path else []:
        module = getattr(module, part, None)
    raw = raw_module(module)
    return raw if isinstance(raw, torch.nn.Module) else None


def _build(model: TransformerBridge) -> NativeForward | None:
    try:
        hf = model.original_model
        layers = [raw_module(block) for block in model.blocks]
        attentions = [_aliased(block, "hook_attn_out") for block in model.blocks]
        projections = [raw_module(block.attn.o) for block in model.blocks]
        mlps = [raw_module(block.mlp) for block in model.blocks]
    except AttributeError:
        return None
    if not all(isinstance(p, torch.nn.Module) for p in layers + projections + mlps):
        return None
    if len({p.device for p in hf.parameters()}) != 1:
        return None
    return NativeForward(model, layers, attentions, projections, mlps)


def _next_positions(attention_mask: Tensor | None, ids: Tensor) -> Tensor:
    """The position id of every row's first new token `[batch, 1]` (its count of real prompt tokens)."""
    if attention_mask is None:
        return torch.full((ids.shape[0], 1), ids.shape[1], device=ids.device)
    return attention_mask.long().sum(-1, keepdim=True)


def fixed_shapes(device: torch.device) -> bool:
    """Whether greedy decoding on `device` runs at fixed shapes (`gates._static`): asked for by
    `static_cache` or `compile`, or on a GPU unless `cuda_graph` is off."""
    if _OPTIONS["static_cache"] or _OPTIONS["compile"]:
        return True
    return device.type == "cuda" and _OPTIONS["cuda_graph"] is not False


def captures_decoding(device: torch.device) -> bool:
    """Whether fixed-shape decoding on `device` captures its step as a CUDA graph: on a GPU, unless
    `cuda_graph` is off."""
    return device.type == "cuda" and _OPTIONS["cuda_graph"] is not False


def decode_check_every() -> int:
    """How many greedy tokens pass between two reads of the stop flags (`native_options(check_every=...)`)."""
    return int(_OPTIONS["check_every"])


@checked
def pack_rows(device: torch.device) -> bool:
    """Whether loss passes on `device` may pack their rows (see `native_options`)."""
    chosen = _OPTIONS["pack_rows"]
    return device.type == "cpu" if chosen is None else bool(chosen)


def pack_rows_asked() -> bool | None:
    """`native_options(pack_rows=...)` as set: True or False when asked for, None by default."""
    return _OPTIONS["pack_rows"]


@checked
def prefix_sharing(device: torch.device) -> bool:
    """Whether greedy decoding on `device` shares prefixes across rows (see `native_options`)."""
    chosen = _OPTIONS["prefix_sharing"]
    return device.type == "cpu" if chosen is None else bool(chosen)


@checked
def native_forward(model: TransformerBridge) -> NativeForward | None:
    """The model's native forward pass when it can stand in for the bridge now (see `cached_forward`
    for the conditions), else None."""
    return cached_forward(model, _CACHE_ATTR, _build, runs_modules=True)
