"""Host-to-device copies that do not stall the GPU.

A plain `tensor.to("cuda")` from ordinary (pageable) host memory waits until every kernel queued
before it has run: one host synchronisation per call, which in a loop drains the GPU's queue each
step. Copying from pinned (page-locked) memory with `non_blocking=True` queues the copy behind
those kernels instead; PyTorch keeps the pinned buffer alive until the copy is done.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def to_device(tensor: Tensor, device: torch.device | str) -> Tensor:
    """`tensor` on `device`, copied without a host synchronisation when it goes from the CPU to a GPU."""
    device = torch.device(device)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def copy_into(buffer: Tensor, host: Tensor) -> None:
    """Copy `host` (a CPU tensor) into `buffer` in place, without a host synchronisation when `buffer`
    is on a GPU (a captured CUDA graph reads its inputs from such fixed buffers)."""
    if buffer.device.type == "cuda":
        host = host.pin_memory()
    buffer.copy_(host, non_blocking=buffer.device.type == "cuda")


def synchronizer(device: torch.device | str) -> Callable[[], None] | None:
    """What waits for the work queued on `device` (a GPU's `torch.cuda.synchronize`), or None where
    operations finish before they return (the CPU): a clock read after the call then measures the
    work, not only the time it took to queue it."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)
