"""A removal sweep split over two gloo ranks (CPU processes) equals the single-process sweep."""

from __future__ import annotations

import functools
import operator
import pickle
import socket

import pytest
import torch
import torch.multiprocessing as mp

from headsup_lens import load_model, removal_sweep
from headsup_lens._distributed import rank_and_world, shard
from headsup_lens.analysis import random_order

PROMPT = "cat dog"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep_on_rank(rank: int, world: int, port: int, model_dir: str, out_dir: str, kwargs: dict) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = load_model(model_dir, device="cpu", dtype="float32")
        result = removal_sweep(model, PROMPT, random_order(model, seed=1)[:9], distributed=True, **kwargs)
        with open(f"{out_dir}/rank{rank}.pkl", "wb") as handle:
            pickle.dump(result, handle)
    finally:
        dist.destroy_process_group()


def test_sweep_over_two_gloo_ranks_equals_one_process(llama, llama_dir, tmp_path):
    kwargs = dict(target_tokens=[7], max_new_tokens=3, record_layers=True, batch_size=2)
    mp.spawn(sweep_on_rank, args=(2, free_port(), str(llama_dir), str(tmp_path), kwargs), nprocs=2, join=True)
    single = removal_sweep(llama, PROMPT, random_order(llama, seed=1)[:9], **kwargs)
    for rank in range(2):
        with open(tmp_path / f"rank{rank}.pkl", "rb") as handle:
            split = pickle.load(handle)
        assert split.ranks.equals(single.ranks)
        # Logits agree to float rounding: a rank's chunks group the rows differently.
        labels = single.tokens.label.tolist()
        assert split.logits[labels].to_numpy() == pytest.approx(single.logits[labels].to_numpy(), abs=1e-5)
        assert split.generation_ids == single.generation_ids and split.tokens.equals(single.tokens)
        assert torch.allclose(split.block_out, single.block_out, atol=1e-6)


def test_shards_cover_every_step_once_and_need_a_process_group(llama):
    for n, world in [(10, 3), (2, 4), (7, 1)]:
        parts = [list(shard(n, rank, world)) for rank in range(world)]
        assert (
            functools.reduce(operator.iadd, parts, []) == list(range(n))
            and max(map(len, parts)) - min(map(len, parts)) <= 1
        )
    assert rank_and_world() == (0, 1)
    with pytest.raises(ValueError, match="init_process_group"):
        removal_sweep(llama, PROMPT, [(0, 1)], distributed=True)
