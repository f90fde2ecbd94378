"""Soft head gates with an L1 term, after Causal Head Gating (Nam et al. 2025)."""

from __future__ import annotations

import torch
from torch import Tensor

from ...gates import gate_hooks
from ._base import MethodContext, chunks, example_losses, register_method


def _fit(
    context: MethodContext, sign: float, *, l1: float, steps: int, lr: float, init: float
) -> tuple[Tensor, list[float]]:
    """Gates g = sigmoid(θ) `[n_layers, n_heads]` (no noise) fitted by Adam on the uninstructed answer
    loss + sign · l1 · mean(g), all examples every step; returns θ and the loss per step."""
    model = context.model
    generator = torch.Generator().manual_seed(context.seed)
    theta = (init + 0.01 * torch.randn(model.cfg.n_layers, model.cfg.n_heads, generator=generator)).to(model.cfg.device)
    theta.requires_grad_(True)
    optimizer = torch.optim.Adam([theta], lr=lr)
    history = []
    n = len(context.batch)
    for _ in range(steps):
        optimizer.zero_grad()
        total = 0.0
        with torch.enable_grad():
            for chunk in chunks(context.batch, context.max_rows):
                gates = torch.sigmoid(theta)
                loss = example_losses(model, chunk, gate_hooks(model, gates, **context.gate_options())).sum() / n
                penalty = sign * l1 * gates.mean() * len(chunk) / n
                (loss + penalty).backward()
                total += float(loss.detach())
        optimizer.step()
        history.append(total)
    return theta.detach(), history


def _soft_gate(context: MethodContext, sign: float, l1: float, steps: int, lr: float, init: float):
    theta, history = _fit(context, sign, l1=l1, steps=steps, lr=lr, init=init)
    settings = {
        **context.ablation_settings(),
        "l1": l1,
        "steps": steps,
        "lr": lr,
        "init": init,
        "final_loss": history[-1],
        "n_below_half": int((theta < 0).sum()),
    }
    return -theta, settings


@register_method("soft_gate_necessary", "CHG-style soft gates, L1 pushing gates up: only heads that must go fall")
def soft_gate_necessary(
    context: MethodContext, l1: float = 1.0, steps: int = 200, lr: float = 0.05, init: float = 3.0
) -> tuple[Tensor, dict]:
    """Loss − l1 · mean(g): the penalty rewards keeping heads, so a gate falls only where removing the
    head is needed to lower the uninstructed loss. Order: lowest gate logit first."""
    return _soft_gate(context, -1.0, l1, steps, lr, init)


@register_method("soft_gate_sufficient", "CHG-style soft gates, L1 pushing gates down: a small sufficient set stays")
def soft_gate_sufficient(
    context: MethodContext, l1: float = 1.0, steps: int = 200, lr: float = 0.05, init: float = 3.0
) -> tuple[Tensor, dict]:
    """Loss + l1 · mean(g): the penalty rewards removing heads, so only a set sufficient for the task
    keeps its gates high. Order: lowest gate logit first."""
    return _soft_gate(context, 1.0, l1, steps, lr, init)
