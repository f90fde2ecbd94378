"""Work split over the ranks of a `torch.distributed` process group (gloo on CPUs, NCCL on GPUs).

Launch one process per rank (`torchrun --nproc-per-node N script.py`, or `torch.multiprocessing`)
and call `torch.distributed.init_process_group` before using the `distributed=True` options of the
library; every rank then gets the same, complete result.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def rank_and_world(required: bool = False) -> tuple[int, int]:
    """`(rank, world_size)` of the default process group; `(0, 1)` when there is none.

    With `required`, a missing process group is an error (the caller asked for a distributed run).
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if required:
        raise ValueError(
            "distributed=True needs a torch.distributed process group: launch with torchrun and call "
            "torch.distributed.init_process_group('gloo') (or 'nccl' on GPUs) first"
        )
    return 0, 1


def shard(n: int, rank: int, world: int) -> range:
    """Rank `rank`'s contiguous share of `range(n)`: sizes differ by at most one, lower ranks first."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside a world of {world}")
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


def gather(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank (picklable values; tensors on the CPU)."""
    _, world = rank_and_world(required=True)
    out: list[Any] = [None] * world
    dist.all_gather_object(out, value)
    return out


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum over the ranks of `tensor` (a new tensor; the input is left as it was)."""
    total = tensor.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total
