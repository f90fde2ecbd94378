"""Gradient rankings: gate-gradient importance (Michel et al. 2019), attribution patching, activation pattern."""

from __future__ import annotations

import torch
from torch import Tensor

from ...gates import gate_hooks
from .._patterns import activation_pattern as _activation_pattern
from ._base import MethodContext, chunks, example_losses, register_method


def _per_layer_l2(x: Tensor) -> Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-20)


@register_method("gate_gradient", "Michel et al. 2019: E_x |dL_x/dxi_h| at xi = 1; least important removed first")
def gate_gradient(context: MethodContext, normalize: bool = False) -> tuple[Tensor, dict]:
    """Head importance I_h = E_x |∂L_x/∂ξ_h| at ξ = 1, ξ_h a gate on head h's output `hook_z` and L_x
    the example's mean answer NLL without instruction (Michel, Levy & Neubig 2019). The order
    removes the least important heads first (score = -I), as their pruning does. `normalize`
    divides each layer's importances by their L2 norm (their per-layer normalisation)."""
    model = context.model
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64)
    for chunk in chunks(context.batch, context.max_rows):
        gates = torch.ones(
            len(chunk), model.cfg.n_layers, model.cfg.n_heads, device=model.cfg.device, requires_grad=True
        )  # one gate row per example: per-example gradients
        with torch.enable_grad():
            losses = example_losses(model, chunk, gate_hooks(model, gates))
            (grad,) = torch.autograd.grad(losses.sum(), [gates])
        total += grad.abs().double().sum(0).cpu()
    importance = (total / len(context.batch)).float()
    if normalize:
        importance = _per_layer_l2(importance)
    return -importance, {"normalize": normalize}


def z_and_gradients(context: MethodContext, chunk) -> tuple[list[Tensor], list[Tensor]]:
    """`hook_z` of every layer and the gradient of the summed per-example losses at it (a zero probe
    added at `hook_z`: its gradient is the total derivative through every later layer)."""
    model = context.model
    seen: dict[int, Tensor] = {}
    probes: dict[int, Tensor] = {}

    def probe(z: Tensor, hook) -> Tensor:
        layer = int(hook.name.split(".")[1])
        seen[layer] = z.detach()
        probes[layer] = torch.zeros_like(z, requires_grad=True)
        return z + probes[layer]

    n_layers = model.cfg.n_layers
    hooks = [(f"blocks.{l}.attn.hook_z", probe) for l in range(n_layers)]
    with torch.enable_grad():
        losses = example_losses(model, chunk, hooks)
        grads = torch.autograd.grad(losses.sum(), [probes[l] for l in range(n_layers)])
    return [seen[l] for l in range(n_layers)], list(grads)


@register_method("attribution_patching", "first-order estimate of each head's ablation: dL/dz . (z - z_ablated)")
def attribution_patching(context: MethodContext) -> tuple[Tensor, dict]:
    """Score = E_x Σ_{pos, d} ∂L_x/∂z · (z − z_abl): the first-order estimate of the loss drop when the
    head is ablated (zero: z_abl = 0, i.e. ∂L/∂z · z; scaled: α z; mean: the head's mean output).
    With zero ablation it equals the signed gate gradient E_x ∂L_x/∂ξ_h at ξ = 1."""
    model = context.model
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64)
    for chunk in chunks(context.batch, context.max_rows):
        zs, grads = z_and_gradients(context, chunk)
        for layer, (z, grad) in enumerate(zip(zs, grads)):
            if context.ablation == "zero":
                delta = z
            elif context.ablation == "scaled":
                delta = (1.0 - context.alpha) * z
            else:  # mean ablation: MethodContext holds the means exactly then
                assert context.mean is not None
                delta = z - context.mean[layer].to(z.dtype)
            # [batch, pos, head, d_head]; padding carries no gradient (it is after every answer token)
            total[layer] += (grad * delta).sum((0, 1, 3)).double().cpu()
    return (total / len(context.batch)).float(), context.ablation_settings()


@register_method(
    "activation_pattern", "E_x sum |A * dL/dA| of each head's attention pattern; most active removed first"
)
def activation_pattern(context: MethodContext, activation: str = "pattern") -> tuple[Tensor, dict]:
    """The gradient activation pattern (`analysis.activation_pattern`) on the uninstructed examples;
    it is a magnitude, so the order removes the most active heads first."""
    scores = _activation_pattern(context.model, context.batch, batch_size=context.max_rows, activation=activation)
    return scores, {"activation": activation}
