"""The paper's Gumbel-sigmoid straight-through masks (Sec. 3.2): the noise and the estimator."""

from __future__ import annotations

import torch
from torch import Tensor


def left_tail_gumbel(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """G = log(E), E ~ Exp(1) (= log(-log U)): the paper's noise, drawn on the CPU for reproducibility."""
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
    return torch.log(-torch.log(uniform)).float()


def straight_through(logits: Tensor, noise: Tensor, tau: float | Tensor) -> Tensor:
    """Hard 0/1 mask in the forward pass, the gradient of sigmoid((M + G) / tau) in the backward pass
    (`tau` a number, or a 0-d tensor on the device: a captured step reads it in place)."""
    soft = torch.sigmoid((logits + noise) / tau)
    hard = (soft >= 0.5).to(soft.dtype)
    return hard - soft.detach() + soft
