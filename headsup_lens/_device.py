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


def synchronizer(device: torch.device | str) -> Callable[[], None] | None:
    """What waits for the work queued on `device` (a GPU's `torch.cuda.synchronize`), or None where
    operations finish before they return (the CPU): a clock read after the call then measures the
    work, not only the time it took to queue it."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)


class Staging:
    """A step's inputs copied to the device through one persistent host buffer per dtype, pinned on a
    GPU, in two halves used in turn: a step fills its half on the host (`host`) and sends it with one
    copy per dtype (`send`), without waiting for the device; the half a step fills was sent two steps
    ago, and only that copy is waited for. `device` holds the tensors the device reads, by name, at
    fixed addresses (what a captured CUDA graph reads in place).

    `layout`: name -> (shape, dtype) of every input."""

    def __init__(self, layout: dict[str, tuple[tuple[int, ...], torch.dtype]], device: torch.device | str) -> None:
        device = torch.device(device)
        self.cuda = device.type == "cuda"
        dtypes = list(dict.fromkeys(dtype for _, dtype in layout.values()))
        sizes = {d: sum(torch.Size(s).numel() for s, dt in layout.values() if dt == d) for d in dtypes}
        self._device_flat = {d: torch.zeros(sizes[d], dtype=d, device=device) for d in dtypes}
        self._host_flat = [{d: torch.zeros(sizes[d], dtype=d, pin_memory=self.cuda) for d in dtypes} for _ in range(2)]
        self._sent: list[torch.cuda.Event | None] = [None, None]
        self._half = 0

        def views(flat: dict[torch.dtype, Tensor]) -> dict[str, Tensor]:
            offsets = dict.fromkeys(dtypes, 0)
            out = {}
            for name, (shape, dtype) in layout.items():
                n = torch.Size(shape).numel()
                out[name] = flat[dtype][offsets[dtype] : offsets[dtype] + n].view(shape)
                offsets[dtype] += n
            return out

        self.device = views(self._device_flat)
        self._host = [views(flat) for flat in self._host_flat]

    def host(self) -> dict[str, Tensor]:
        """This step's host tensors by name, to fill before `send` (free to write: their last copy is done)."""
        sent = self._sent[self._half]
        if sent is not None:
            sent.synchronize()  # the copy of two steps ago: long done unless the host runs far ahead
        return self._host[self._half]

    def send(self) -> None:
        """Copy this step's host tensors into `device` (one copy per dtype), and switch halves."""
        for dtype, flat in self._host_flat[self._half].items():
            self._device_flat[dtype].copy_(flat, non_blocking=self.cuda)
        if self.cuda:
            event = torch.cuda.Event()
            event.record()
            self._sent[self._half] = event
        self._half = 1 - self._half
