"""Work split over the ranks of a `torch.distributed` process group (gloo on CPUs, NCCL on GPUs).

Launch one process per rank (`torchrun --nproc-per-node N script.py`, or `torch.multiprocessing`)
and call `torch.distributed.init_process_group` before using the `distributed=True` options of the
library; every rank then gets the same, complete result.

On a model sharded over the ranks (`load_model(shard="fsdp")`) every forward pass is a collective:
each rank must run the same passes in the same order. `padded_share` gives every rank as many rows
as the largest share (a short rank repeats a row and drops its result), and `all_agree` lets loops
whose length depends on the data (greedy decoding stops when every row has stopped) end together.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

_T = TypeVar("_T")
# Errors a rank raises itself that every other rank learns about through `from_rank0` (by type).
_SHARED_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, OSError)


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


def padded_share(n: int, rank: int, world: int) -> tuple[range, list[int]]:
    """Rank `rank`'s rows of `range(n)` (`shard`) and the rows it runs: its own, then repeats of its
    last row (of row 0 when it has none) up to the largest share, `ceil(n / world)`, so that every
    rank runs the same number of rows. The results of the repeats are dropped (`run[len(mine):]`)."""
    mine = shard(n, rank, world)
    longest = -(-n // world)
    filler = mine.stop - 1 if len(mine) else 0
    return mine, list(mine) + [filler] * (longest - len(mine)) if n else []


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


def all_min(value: int, device: torch.device | str) -> int:
    """The smallest `value` over the ranks: a collective (every rank calls it at the same point), on
    a one-element tensor on `device` (NCCL reduces GPU tensors only)."""
    least = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(least, op=dist.ReduceOp.MIN)
    return int(least.item())


def all_agree(flag: bool, device: torch.device | str) -> bool:
    """Whether `flag` holds on every rank (a collective, see `all_min`)."""
    return bool(all_min(int(flag), device))


def from_rank0(compute: Callable[[], _T]) -> _T:
    """`compute()` run on rank 0 only, its value on every rank (a collective; picklable values).

    A decision that reads files only rank 0 may see (a checkpoint to resume from, partial results)
    is taken once and shared, so every rank goes on alike; a ValueError, TypeError or OSError that
    `compute` raises is raised on every rank (as its type, with its message), not only on rank 0
    while the others wait.
    """
    rank, _ = rank_and_world(required=True)
    box: list[Any] = [None]  # ("value", value) or ("error", (type name, message))
    if rank == 0:
        try:
            box[0] = ("value", compute())
        except _SHARED_ERRORS as error:
            box[0] = ("error", (type(error).__name__, str(error)))
            dist.broadcast_object_list(box, src=0)
            raise
    dist.broadcast_object_list(box, src=0)
    sent = cast(tuple[str, Any], box[0])
    if sent[0] == "error":
        name, message = sent[1]
        raise {error.__name__: error for error in _SHARED_ERRORS}[name](message)
    return sent[1]


def launched_ranks() -> int:
    """The number of ranks `torchrun` started (`WORLD_SIZE`; 1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def join_torchrun(
    device: str | None, *, always: bool = False, timeout_minutes: float = 30.0
) -> tuple[int | None, str | None]:
    """Under `torchrun` (WORLD_SIZE > 1, or any WORLD_SIZE with `always`): join the process group
    (NCCL on GPUs, gloo on CPUs) and return this rank and its device (`cuda:LOCAL_RANK` on GPUs);
    else `(None, device)`. A collective that waits longer than `timeout_minutes` fails on every
    rank (a rank that hangs instead of dying); a rank that dies is noticed at once."""
    if launched_ranks() <= 1 and not (always and "RANK" in os.environ):
        return None, device
    cuda = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    if cuda and device in (None, "cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    if cuda and device is not None:
        torch.cuda.set_device(torch.device(device))  # NCCL's object collectives use the current device
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(minutes=timeout_minutes))
    return dist.get_rank(), device
