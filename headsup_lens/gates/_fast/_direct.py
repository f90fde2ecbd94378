"""Greedy decoding under the value gate, sharing rows, in a plain forward pass of the wrapped weights
(Llama-family decoders).

The bridge computes attention eagerly so that `hook_attn_scores` and `hook_pattern` can be read
and edited. The value gate needs neither: it scales each head's output before `W_O`, and
`hook_z` is the `o_proj` input. When no hook is active on the model and its decoder layers are
ones this module knows (Llama, Qwen2 without sliding windows), greedy decoding on the CPU (where
sharing rows pays, `native_options(prefix_sharing=...)`) runs here instead, on the same weights
(losses and decoding on a GPU take the model's own forward pass, `gates._native`, on every
architecture):
- attention through the fused kernel (`scaled_dot_product_attention`, grouped-query heads
  without copies), with the gate multiplied into the `o_proj` input;
- the norms, rotary embedding and activation are the wrapped model's own modules;
- in greedy decoding, rows that carry the same computation are computed once: at layer L, rows
  with the same tokens so far and the same gates below L have the same hidden states and keys
  (a removal sweep's rows differ only above the first head they remove).
Another architecture, or a GPU, decodes on the native pass; the query gate, any hook on the model,
compatibility mode or a model spread over devices runs through the bridge. Tests compare the paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ..._typecheck import checked
from ...models import unembed
from ...models._sharding import is_sharded
from .._paths import Decoding, GateSpec, cached_forward, check_rows, prompt_positions, raw_module

_DECODER_LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer")
_CACHE_ATTR = "_headsup_direct_forward"


@dataclass
class _Layer:
    ln1: torch.nn.Module
    q: torch.nn.Linear
    k: torch.nn.Linear
    v: torch.nn.Linear
    o: torch.nn.Linear
    ln2: torch.nn.Module
    gate: torch.nn.Linear
    up: torch.nn.Linear
    down: torch.nn.Linear
    act: torch.nn.Module


def _linear(module) -> torch.nn.Linear | None:
    raw = raw_module(module)
    return raw if isinstance(raw, torch.nn.Linear) else None


def _build(model: TransformerBridge) -> DirectForward | None:
    """The direct forward of `model`, or None when its decoder is not one this module reproduces."""
    try:
        hf = model.original_model
        config = hf.config
    except AttributeError:
        return None
    if is_sharded(model):  # it reads the weights outside their modules' calls, where FSDP gathers them
        return None
    if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) != 1:
        return None
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])):
        return None
    layers = []
    for block in model.blocks:
        layer = raw_module(block)
        if type(layer).__name__ not in _DECODER_LAYERS:
            return None
        attn, mlp = raw_module(getattr(layer, "self_attn", None)), raw_module(getattr(layer, "mlp", None))
        found = [_linear(getattr(attn, n, None)) for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
        found += [_linear(getattr(mlp, n, None)) for n in ("gate_proj", "up_proj", "down_proj")]
        norms = [raw_module(getattr(layer, n, None)) for n in ("input_layernorm", "post_attention_layernorm")]
        linears = [x for x in found if x is not None]
        modules = [x for x in norms if isinstance(x, torch.nn.Module)]
        act = getattr(mlp, "act_fn", None)
        if len(linears) != len(found) or len(modules) != len(norms) or not isinstance(act, torch.nn.Module):
            return None
        q, k, v, o, gate, up, down = linears
        layers.append(_Layer(modules[0], q, k, v, o, modules[1], gate, up, down, act))
    parameters = list(hf.parameters())
    if len({p.device for p in parameters}) != 1:
        return None
    first = raw_module(model.blocks[0].attn)
    return DirectForward(
        model=model,
        layers=layers,
        embed=raw_module(model.embed),
        rotary=raw_module(model.rotary_emb),
        final_norm=raw_module(model.ln_final),
        n_heads=model.cfg.n_heads,
        n_kv=layers[0].k.out_features // first.head_dim,
        d_head=first.head_dim,
        scaling=float(first.scaling),
    )


@checked
def direct_forward(model: TransformerBridge) -> DirectForward | None:
    """The model's direct forward pass when it can stand in for the bridge now: a known decoder,
    no hook attached to any hook point, not in compatibility mode, and not turned off by
    `direct_path(False)`. None otherwise (then the bridge runs)."""
    return cached_forward(model, _CACHE_ATTR, _build, runs_modules=False)


def _unique_rows(x: Tensor) -> Tensor:
    """Group id of every row of a 2-D tensor (equal rows share an id)."""
    return torch.unique(x, dim=0, return_inverse=True)[1]


def _first_rows(groups: Tensor, n_groups: int) -> Tensor:
    """A representative row of each group: its first row."""
    rows = torch.arange(len(groups), device=groups.device)
    return torch.full((n_groups,), len(groups), device=groups.device).scatter_reduce(0, groups, rows, "amin")


@dataclass
class _Plan:
    """Which rows share computation: `groups[l]` is the group of every row at the input of layer l
    (l = 0..n_layers, the last one after the final layer), `rep[l]` a row of each group, and
    `up[l]` the group at layer l of every group at layer l + 1 (None where nothing splits)."""

    groups: list[Tensor]
    rep: list[Tensor]
    up: list[Tensor | None]


def _plan(history: Tensor, codes: list[Tensor]) -> _Plan:
    groups = [history]
    for code in codes:
        groups.append(_unique_rows(torch.stack([groups[-1], code], dim=1)))
    counts = [int(g.max()) + 1 for g in groups]
    rep = [_first_rows(g, n) for g, n in zip(groups, counts)]
    up = [
        None if counts[l + 1] == counts[l] else groups[l][rep[l + 1]]  # equal counts: nothing splits
        for l in range(len(codes))
    ]
    return _Plan(groups, rep, up)


@checked
class DirectForward:
    """The forward pass of a Llama-family decoder over its own weights, gated at the `o_proj` input."""

    def __init__(
        self,
        *,
        model: TransformerBridge,
        layers: list[_Layer],
        embed,
        rotary,
        final_norm,
        n_heads: int,
        n_kv: int,
        d_head: int,
        scaling: float,
    ) -> None:
        self.model, self.layers, self.embed, self.rotary, self.final_norm = model, layers, embed, rotary, final_norm
        self.n_heads, self.n_kv, self.d_head, self.scaling = n_heads, n_kv, d_head, scaling
        self._rope = apply_rotary_pos_emb

    # ------------------------------------------------------------------ one layer
    def _qkv(self, i: int, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        layer = self.layers[i]
        rows, pos, _ = h.shape
        x = layer.ln1(h)
        q = F.linear(x, layer.q.weight, layer.q.bias).view(rows, pos, self.n_heads, self.d_head).transpose(1, 2)
        k = F.linear(x, layer.k.weight, layer.k.bias).view(rows, pos, self.n_kv, self.d_head).transpose(1, 2)
        v = F.linear(x, layer.v.weight, layer.v.bias).view(rows, pos, self.n_kv, self.d_head).transpose(1, 2)
        q, k = self._rope(q, k, cos, sin)
        return q, k, v

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        """`[rows, pos, n_heads, d_head]`: every head's output z (what `hook_z` sees)."""
        z = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=self.scaling, enable_gqa=self.n_kv != self.n_heads
        )
        return z.transpose(1, 2)

    def _gate(self, i: int, z: Tensor, heads: Tensor | None, mean: Tensor | None) -> Tensor:
        if heads is None:
            return z
        e = heads[:, i].to(device=z.device, dtype=z.dtype)[:, None, :, None]
        if mean is None:
            return z * e
        return z * e + (1.0 - e) * mean[i].to(device=z.device, dtype=z.dtype)

    def _finish(self, i: int, h: Tensor, z: Tensor, mlp: Tensor | None) -> tuple[Tensor, Tensor]:
        """The rest of layer i from the gated z: `(attn_out, resid_post)`."""
        layer = self.layers[i]
        attn_out = F.linear(z.flatten(2), layer.o.weight, layer.o.bias)
        h = h + attn_out
        x = layer.ln2(h)
        out = F.linear(
            layer.act(F.linear(x, layer.gate.weight, layer.gate.bias)) * F.linear(x, layer.up.weight, layer.up.bias),
            layer.down.weight,
            layer.down.bias,
        )
        if mlp is not None:
            out = out * mlp[:, i].to(device=out.device, dtype=out.dtype)[:, None, None]
        return attn_out, h + out

    # ------------------------------------------------------------------ masks and positions
    @staticmethod
    def _prompt_mask(attention_mask: Tensor | None) -> tuple[Tensor | None, bool]:
        """`(mask, causal)` for sdpa over a prompt: plain causal attention when no row has a padded
        position before a real one; else causal attention to real keys, and a padded query to
        itself (its output is never read, but must stay finite)."""
        if attention_mask is None:
            return None, True
        real = attention_mask.bool()
        if bool((real[:, 1:] <= real[:, :-1]).all()):  # only right padding: causal attention is exact
            return None, True
        pos = real.shape[1]
        causal = torch.ones(pos, pos, dtype=torch.bool, device=real.device).tril()
        allowed = causal & (real[:, None, :] | torch.eye(pos, dtype=torch.bool, device=real.device))
        return allowed[:, None], False

    # ------------------------------------------------------------------ greedy decoding
    def _codes(self, spec: GateSpec | None, rows: Tensor) -> list[Tensor]:
        """Per layer, an id of every row's gate there (rows with equal gates share it)."""
        n_layers = len(self.layers)
        zeros = torch.zeros(len(rows), dtype=torch.long, device=rows.device)
        if spec is None:
            return [zeros] * n_layers
        parts = []
        if spec.heads is not None and spec.heads.shape[0] > 1:
            parts.append(spec.heads[rows.to(spec.heads.device)].float())
        if spec.mlp is not None and spec.mlp.shape[0] > 1:
            parts.append(spec.mlp[rows.to(spec.mlp.device)].float()[:, :, None])
        if not parts:
            return [zeros] * n_layers
        gates = torch.cat(parts, dim=2).to(rows.device)
        return [_unique_rows(gates[:, l]) for l in range(n_layers)]

    @staticmethod
    def _rows_of(x: Tensor | None, rows: Tensor) -> Tensor | None:
        if x is None or x.shape[0] == 1:
            return x
        return x[rows.to(x.device)]

    def greedy(
        self, job: Decoding, *, record_layers: bool = False
    ) -> tuple[list[list[int]], Tensor, dict[str, Tensor], Tensor | None]:
        """Greedy continuations (uncut), the next-token logits at the last prompt position
        `[batch, d_vocab]` (float32, CPU), with `record_layers` `blocks.L.hook_attn_out` /
        `blocks.L.hook_resid_post` at the last prompt position (`[batch, d_model]`, float32, CPU),
        and with `job.answers` the final norm's output after each answer token but the last
        (`[batch, answer - 1, d_model]`; see `NativeForward.greedy`), else None.

        Rows leave at a stop token; rows with the same tokens so far and the same gates below a
        layer share that layer's computation and its KV cache (see `_plan`).
        """
        ids, attention_mask, spec, stop_ids = job.ids, job.attention_mask, job.spec, job.stop_ids
        max_new_tokens, on_pass = job.max_new_tokens, job.on_pass
        device = ids.device
        batch, _ = ids.shape
        check_rows(spec, batch)
        n_layers = len(self.layers)
        heads, mean, mlp = (None, None, None) if spec is None else (spec.heads, spec.mean, spec.mlp)
        active = torch.arange(batch, device=device)
        running = attention_mask  # [batch, length so far] (None: no padding)
        key = ids if attention_mask is None else torch.cat([ids, attention_mask.long()], dim=1)
        history = _unique_rows(key)
        codes_all = self._codes(spec, active)
        plan = _plan(history, codes_all)
        new_tokens: list[list[int]] = [[] for _ in range(batch)]
        recorded: dict[str, Tensor] = {}

        # The prompt pass, group by group.
        rep0 = plan.rep[0]
        h = self.embed(ids[rep0])
        mask0 = None if attention_mask is None else attention_mask[rep0]
        cos, sin = self.rotary(h, prompt_positions(mask0, ids[rep0]))
        caches: list[tuple[Tensor, Tensor]] = []
        for i in range(n_layers):
            group_mask = None if attention_mask is None else attention_mask[plan.rep[i]]
            mask, causal = self._prompt_mask(group_mask)
            q, k, v = self._qkv(i, h, cos, sin)
            caches.append((k, v))
            z = self._attend(q, k, v, mask, causal)
            if plan.up[i] is not None:  # groups split here: each child takes its parent's state
                z, h, cos, sin = z[plan.up[i]], h[plan.up[i]], cos[plan.up[i]], sin[plan.up[i]]
            rep = plan.rep[i + 1]
            z = self._gate(i, z, self._rows_of(heads, rep), mean)
            attn_out, h = self._finish(i, h, z, self._rows_of(mlp, rep))
            if record_layers:
                recorded[f"blocks.{i}.hook_attn_out"] = attn_out[:, -1].float()[plan.groups[i + 1]].cpu()
                recorded[f"blocks.{i}.hook_resid_post"] = h[:, -1].float()[plan.groups[i + 1]].cpu()
        logits = unembed(self.model, self.final_norm(h[:, -1].contiguous()))
        first_logits = logits.float()[plan.groups[-1]].cpu()
        if on_pass is not None:
            on_pass()
        answered = None if job.answers is None else self._answer_states(job, plan, caches)
        if max_new_tokens == 0:
            return new_tokens, first_logits, recorded, answered

        row_ids = logits.argmax(-1)[plan.groups[-1]]  # the first new token of every active row
        for step in range(max_new_tokens):
            if step:
                row_ids, plan, caches, history, running = self._decode_step(
                    plan, caches, history, running, active, row_ids, codes_all, spec
                )
                if on_pass is not None:
                    on_pass()
            for row, token in zip(active.tolist(), row_ids.tolist()):
                new_tokens[row].append(token)
            done = torch.isin(row_ids, stop_ids)
            if step == max_new_tokens - 1 or bool(done.all()):
                break
            if bool(done.any()):  # finished rows leave; their groups go with the next plan
                keep = (~done).nonzero().squeeze(1)
                active, row_ids, history = active[keep], row_ids[keep], history[keep]
                plan = _Plan([g[keep] for g in plan.groups], plan.rep, plan.up)
                if running is not None:
                    running = running[keep]
        return new_tokens, first_logits, recorded, answered

    def _answer_states(self, job: Decoding, plan: _Plan, caches: list[tuple[Tensor, Tensor]]) -> Tensor | None:
        """The final norm's output after each answer token but the last, teacher-forced after the
        prompt pass's keys and values (each row's own: no sharing); None when every answer is one
        token. Right-padded answers need no mask of their own: a real token sees only real ones."""
        answers, attention_mask, spec = job.answers, job.attention_mask, job.spec
        assert answers is not None
        if answers.shape[1] < 2:
            return None
        heads, mean, mlp = (None, None, None) if spec is None else (spec.heads, spec.mean, spec.mlp)
        feed = answers[:, :-1].clamp(min=0)
        batch, n = feed.shape
        device = feed.device
        length = caches[0][0].shape[2]
        real = torch.ones(batch, length, dtype=torch.bool, device=device)
        if attention_mask is not None:
            real = attention_mask.bool()
        start = real.long().sum(-1, keepdim=True)  # each row's next position
        h = self.embed(feed)
        cos, sin = self.rotary(h, start + torch.arange(n, device=device))
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        allowed = torch.cat([real[:, None, :].expand(batch, n, length), causal.expand(batch, n, n)], dim=-1)[:, None]
        rows = torch.arange(batch, device=device)
        for i in range(len(self.layers)):
            q, k, v = self._qkv(i, h, cos, sin)
            group = plan.groups[i]
            k = torch.cat([caches[i][0][group], k], dim=2)
            v = torch.cat([caches[i][1][group], v], dim=2)
            z = self._gate(i, self._attend(q, k, v, allowed, False), self._rows_of(heads, rows), mean)
            h = self._finish(i, h, z, self._rows_of(mlp, rows))[1]
        return self.final_norm(h)

    def _decode_step(self, plan, caches, history, running, active, row_ids, codes_all, spec):
        """One cached pass of every active row's newest token; returns the next tokens and the new state."""
        device = row_ids.device
        heads, mean, mlp = (None, None, None) if spec is None else (spec.heads, spec.mean, spec.mlp)
        history = _unique_rows(torch.stack([history, row_ids], dim=1))
        codes = [c[active] for c in codes_all] if len(active) != len(codes_all[0]) else codes_all
        new = _plan(history, codes)
        if running is not None:
            running = torch.cat([running, running.new_ones(len(active), 1)], dim=1)
        # Each new group's cache is its rows' old group's cache (groups only split or vanish).
        for i in range(len(self.layers)):
            parent = plan.groups[i][new.rep[i]]
            if len(parent) != caches[i][0].shape[0] or not bool(
                (parent == torch.arange(len(parent), device=device)).all()
            ):
                caches[i] = (caches[i][0][parent], caches[i][1][parent])
        rep0 = new.rep[0]
        h = self.embed(row_ids[rep0][:, None])
        total = caches[0][0].shape[2] + 1
        if running is None:
            positions = torch.full((len(rep0), 1), total - 1, device=device)
        else:
            positions = (running.long().cumsum(-1) - 1)[:, -1:][rep0]
        cos, sin = self.rotary(h, positions)
        rows_all = active
        for i in range(len(self.layers)):
            q, k, v = self._qkv(i, h, cos, sin)
            k = torch.cat([caches[i][0], k], dim=2)
            v = torch.cat([caches[i][1], v], dim=2)
            caches[i] = (k, v)
            mask = None if running is None else running[new.rep[i]].bool()[:, None, None, :]
            z = self._attend(q, k, v, mask, False)
            if new.up[i] is not None:
                z, h, cos, sin = z[new.up[i]], h[new.up[i]], cos[new.up[i]], sin[new.up[i]]
            rep = rows_all[new.rep[i + 1]]
            z = self._gate(i, z, self._rows_of(heads, rep), mean)
            h = self._finish(i, h, z, self._rows_of(mlp, rep))[1]
        logits = unembed(self.model, self.final_norm(h[:, -1].contiguous()))
        return logits.argmax(-1)[new.groups[-1]], new, caches, history, running
