"""On a model sharded over gloo ranks, every forward pass is a collective: a rank that makes a call
the others do not make must not wait for the process group's timeout (30 minutes). The library's
calls that run the model first check that every rank is entering the same call."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.multiprocessing as mp

PROMPT = "cat dog"


def calls_on_rank(rank: int, world: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from headsup_lens import load_model
    from headsup_lens.analysis import layer_similarity, logit_lens

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=world)
    seen: dict[str, object] = {}
    try:
        model = load_model(model_dir, device="cpu", dtype="float32", shard="fsdp")
        # Different calls: each rank learns it at once, and neither runs a pass.
        try:
            logit_lens(model, PROMPT, k=3) if rank == 0 else layer_similarity(model, PROMPT, "dog cat")
        except ValueError as error:
            seen["different"] = str(error)
        # The same call on every rank runs, with its nested calls (generation inside the lens) unchecked.
        seen["together"] = logit_lens(model, PROMPT, k=3).table
        # Rank 0 alone: an error after HEADSUP_RANK_WAIT seconds, while rank 1 waits elsewhere.
        if rank == 0:
            try:
                logit_lens(model, PROMPT, k=3)
            except ValueError as error:
                seen["alone"] = str(error)
        dist.barrier()
        with open(f"{out_dir}/rank{rank}.pkl", "wb") as handle:
            pickle.dump(seen, handle)
    finally:
        dist.destroy_process_group()


def test_a_rank_alone_in_a_call_or_in_another_call_is_told_so(tmp_path, monkeypatch):
    from ..conftest import build_llama_dir

    model_dir = build_llama_dir(tmp_path / "model", num_hidden_layers=2)
    monkeypatch.setenv("HEADSUP_RANK_WAIT", "3")  # the spawned ranks inherit it
    mp.spawn(calls_on_rank, args=(2, str(model_dir), str(tmp_path)), nprocs=2, join=True)
    seen = [pickle.loads((tmp_path / f"rank{rank}.pkl").read_bytes()) for rank in range(2)]
    for rank in range(2):
        assert seen[rank]["different"].startswith(
            "the ranks of a sharded model made different calls (rank 0 logit_lens, rank 1 layer_similarity)"
        ), seen[rank]["different"]
    assert seen[0]["together"].equals(seen[1]["together"])
    assert seen[0]["alone"].startswith(
        "rank 0 called logit_lens on a model sharded over 2 ranks, and the other ranks did not join it within 3 s "
        "(HEADSUP_RANK_WAIT sets the wait)"
    ), seen[0]["alone"]
    assert "alone" not in seen[1]


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_rank_wait_is_refused_by_name(value, monkeypatch):
    from headsup_lens.models._sharding import rank_wait

    monkeypatch.setenv("HEADSUP_RANK_WAIT", value)
    with pytest.raises(ValueError, match=f"HEADSUP_RANK_WAIT='{value}' is not a positive number of seconds"):
        rank_wait()


def test_an_unsharded_model_is_not_checked(monkeypatch):
    """One process, no process group: the check costs nothing and needs no group."""
    from headsup_lens import load_model
    from headsup_lens.analysis import logit_lens
    from headsup_lens.models import _sharding

    def fail(*args, **kwargs):
        raise AssertionError("same_call ran on an unsharded model")

    monkeypatch.setattr(_sharding, "same_call", fail)
    model = load_model("organism")
    assert len(logit_lens(model, "farm", k=2).table) > 0
