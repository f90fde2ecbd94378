"""The query gate (appendix C.3.2): a masked head attends uniformly to the positions it may see."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge import TransformerBridge

from ._masks import MaskLike, hooked, layer_of, mask_tensor, require_hook_points, row_mask
from ._value import Hook

_VERIFIED_ATTR = "_headsup_query_gate_verified"


def allowed_positions(scores: Float[Tensor, "batch n_heads query key"]) -> Tensor:
    """Where attention may go: causal and padding masks write the dtype minimum (or -inf) there."""
    return torch.isfinite(scores) & (scores > torch.finfo(scores.dtype).min / 2)


def query_gate_hooks(model: TransformerBridge, mask: MaskLike) -> list[Hook]:
    """Forward hooks for `model.hooks(fwd_hooks=...)` implementing `query_gate` (see there)."""
    require_hook_points(model)
    values = mask_tensor(model, mask)

    def gate_scores(scores: Float[Tensor, "batch n_heads query key"], hook: HookPoint) -> Tensor:
        rows = row_mask(values, scores.shape[0], hook.name)[:, layer_of(hook.name)]
        m = rows.to(device=scores.device, dtype=scores.dtype)[:, :, None, None]
        # A score of 0 on every allowed key makes the softmax uniform over exactly those keys;
        # m * scores keeps kept heads (m = 1) unchanged and is differentiable in m.
        return torch.where(allowed_positions(scores), m * scores, scores)

    return [(f"blocks.{layer}.attn.hook_attn_scores", gate_scores) for layer in range(model.cfg.n_layers)]


def verify_query_gate(model: TransformerBridge) -> None:
    """Check once per model that editing `hook_attn_scores` reaches the pattern and the logits.

    Some bridged architectures hand attention to Hugging Face kernels that never read the hook's
    output; there the query gate would silently do nothing, so it refuses to run.
    """
    if getattr(model, _VERIFIED_ATTR, False):
        return
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    missing = [f"blocks.{l}.attn.hook_attn_scores" for l in range(n_layers)]
    missing = [name for name in missing if name not in model.hook_dict]
    if missing:
        raise ValueError(f"query gate needs {missing[0]}, which this architecture does not expose")
    # Row l gates every head of layer l and nothing else: one pass checks all layers.
    masks = torch.ones(n_layers, n_layers, n_heads, device=model.cfg.device)
    for layer in range(n_layers):
        masks[layer, layer] = 0.0
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.cfg.d_vocab, (n_layers, 6), generator=generator).to(model.cfg.device)
    patterns: dict[int, Tensor] = {}

    def keep_pattern(pattern: Tensor, hook: HookPoint) -> None:
        patterns[layer_of(hook.name)] = pattern.detach()

    pattern_hooks = [(f"blocks.{l}.attn.hook_pattern", keep_pattern) for l in range(n_layers)]
    with torch.no_grad(), model.hooks(fwd_hooks=query_gate_hooks(model, masks) + pattern_hooks):
        logits = model(tokens)
    uniform = torch.tril(torch.ones(6, 6, device=logits.device))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    for layer in range(n_layers):
        pattern = patterns.get(layer)
        if pattern is None or not torch.allclose(pattern[layer].float(), uniform.expand_as(pattern[layer]), atol=1e-2):
            raise ValueError(
                f"query gate: editing blocks.{layer}.attn.hook_attn_scores does not give a uniform causal "
                "pattern on this architecture; use value_gate instead"
            )
    with torch.no_grad():
        reference = model(tokens)
    changed = (logits - reference).abs().amax(dim=(1, 2))
    if not (changed > 0).all():
        dead = [l for l in range(n_layers) if changed[l] == 0]
        raise ValueError(
            f"query gate: the edited attention of layers {dead} does not reach the logits on this "
            "architecture (attention is computed outside the hook); use value_gate instead"
        )
    setattr(model, _VERIFIED_ATTR, True)


@contextmanager
def query_gate(model: TransformerBridge, mask: MaskLike) -> Iterator[TransformerBridge]:
    """Gate heads on the query side: a head with mask 0 attends uniformly to every allowed position.

    Acts at `blocks.L.attn.hook_attn_scores` (after the causal and padding masks, before the
    softmax): scores of masked heads become 0 on allowed keys, so padding and future positions keep
    zero weight. Values in (0, 1) soften a head's attention; masks are checked as in `value_gate`.
    The first use on a model verifies that the edit reaches the logits for its architecture and
    raises a ValueError where it cannot.
    """
    hooks = query_gate_hooks(model, mask)
    verify_query_gate(model)
    with hooked(model, hooks):
        yield model
