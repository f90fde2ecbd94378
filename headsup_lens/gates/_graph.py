"""A step captured once as a CUDA graph and replayed: greedy decoding's token step (`gates._static`)
and mask training's fixed-shape step (`training._graphed`).

On a GPU a step over a few hundred tokens is bound by launching its kernels, each issued by
Python, not by computing them. A step with fixed shapes that reads nothing back can be captured
once and replayed as one launch; it reads its inputs from, and writes its outputs to, tensors at
fixed addresses that the caller updates in place between calls.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._warnings import warn


class Replay:
    """Calls `step`: the first call runs it eagerly (on a side stream, which also warms the kernels
    up), then, when `enabled` on a GPU, captures it as a CUDA graph that later calls replay. A
    failed capture warns once (naming `what`) and leaves every later call eager."""

    def __init__(self, step: Callable[[], None], enabled: bool, what: str) -> None:
        self.step, self.enabled, self.what = step, enabled, what
        self.graph: torch.cuda.CUDAGraph | None = None
        self.calls = 0

    def __call__(self) -> None:
        with torch.profiler.record_function(self.what):  # a profile shows the step, captured or not, as one range
            self._call()

    def _call(self) -> None:
        self.calls += 1
        if self.graph is not None:
            self.graph.replay()
            return
        if not self.enabled:
            self.step()
            return
        if self.calls == 1:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step()
            torch.cuda.current_stream().wait_stream(side)
            return
        self.enabled = False  # one capture, successful or not
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.step()
        except Exception as error:  # a step that reads the device back cannot be captured
            message = f"the {self.what} could not be captured as a CUDA graph ({type(error).__name__}: {error})"
            warn(f"{message}; running it eagerly", RuntimeWarning)
            torch.cuda.synchronize()
            self.step()
            return
        self.graph = graph
        graph.replay()
