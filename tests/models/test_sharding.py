"""`load_model(shard="fsdp")` in one process (a process group of one rank): the weights become DTensor
shards read from the checkpoint per shard, and the model computes what the plain load computes;
what a sharded load refuses; the shares and agreement helpers of `_distributed`. Several ranks:
`tests/distributed/test_fsdp.py`."""

from __future__ import annotations

import functools
import operator
import shutil

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import load_model
from headsup_lens._distributed import all_agree, from_rank0, padded_share, shard
from headsup_lens.models import fingerprint, is_sharded, local_share

from ..conftest import random_mask, random_tokens


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_sharded_model_computes_what_the_plain_model_computes(one_rank, llama_dir, llama):
    import headsup_lens as hl

    model = load_model(llama_dir, device="cpu", dtype="float32", shard="fsdp")
    assert is_sharded(model) and not is_sharded(llama)
    assert all(type(p).__name__ == "DTensor" for p in model.original_model.parameters())
    held, total = local_share(model)
    assert held == total == sum(p.numel() for p in llama.original_model.parameters())
    assert fingerprint(model) == fingerprint(llama)  # the hash read from the shards: the checkpoint's
    tokens, mask = random_tokens(llama), random_mask(llama, seed=2)
    with torch.no_grad():
        assert torch.equal(model(tokens), llama(tokens))  # the same weights, the same kernels
        with hl.value_gate(model, mask):
            gated = model(tokens)
        with hl.value_gate(llama, mask):
            assert torch.equal(gated, llama(tokens))
    assert not any(p.requires_grad for p in model.parameters())


def test_the_weights_hash_is_kept_while_fsdp_holds_a_unit_gathered(one_rank, llama_dir, monkeypatch):
    """Between a unit's forward and its reshard FSDP registers gathered tensors in place of the shards
    (and a unit whose last module a pass skips, such as the unembedding, stays gathered): the hash read
    at load must be kept then too, with no collective. Over several ranks, a rank whose allocator placed
    the gathered tensors elsewhere would hash again alone, a collective the others do not make: the
    ranks then abort on a gloo size mismatch."""
    from torch.distributed.fsdp import FSDPModule

    model = load_model(llama_dir, device="cpu", dtype="float32", shard="fsdp")
    loaded = fingerprint(model).content_hash
    hf = model.original_model
    unit = next(m for m in hf.modules() if isinstance(m, FSDPModule) and m is not hf)
    unit.unshard()
    try:
        assert any(type(p).__name__ != "DTensor" for p in hf.parameters())  # the unit's gathered tensors
        collectives: list = []
        monkeypatch.setattr(dist, "all_reduce", lambda *args, **kwargs: collectives.append(args))
        assert fingerprint(model).content_hash == loaded
        assert not collectives
    finally:
        unit.reshard()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(device_map="auto"), "not both"),
        (dict(dtype="fp16"), "not fp16"),
        (dict(freeze=False), "frozen"),
    ],
)
def test_a_sharded_load_refuses_what_it_cannot_do(one_rank, llama_dir, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_model(llama_dir, shard="fsdp", **kwargs)


def test_what_would_gather_or_change_the_weights_refuses_a_sharded_model(one_rank, llama_dir):
    from headsup_lens.data import Task
    from headsup_lens.models import hf_model
    from headsup_lens.sft import finetune_

    model = load_model(llama_dir, device="cpu", dtype="float32", shard="fsdp")
    with pytest.raises(ValueError, match="without shard"):
        hf_model(model)  # a plain copy (bake, save_pretrained)
    with pytest.raises(ValueError, match="without shard"):
        finetune_(model, [Task.from_pairs("words", [("cat", "tac"), ("dog", "god")], n_eval=1)])


def test_a_sharded_load_needs_a_process_group(llama_dir):
    with pytest.raises(ValueError, match="process group"):
        load_model(llama_dir, device="cpu", shard="fsdp")


def test_a_checkpoint_without_safetensors_is_refused(one_rank, tmp_path, llama_dir):
    from safetensors.torch import load_file

    shutil.copytree(llama_dir, tmp_path / "bin")
    torch.save(load_file(tmp_path / "bin" / "model.safetensors"), tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "bin" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="safetensors"):
        load_model(tmp_path / "bin", device="cpu", shard="fsdp")


@given(n=st.integers(0, 40), world=st.integers(1, 7))
def test_padded_shares_cover_every_row_once_and_run_as_many_rows_each(n, world):
    shares = [padded_share(n, rank, world) for rank in range(world)]
    assert functools.reduce(operator.iadd, [list(mine) for mine, _ in shares], []) == list(range(n))
    assert {len(run) for _, run in shares} == {-(-n // world)}  # every rank runs as many rows
    for rank, (mine, run) in enumerate(shares):
        assert mine == shard(n, rank, world) and run[: len(mine)] == list(mine)
        assert all(0 <= row < n for row in run)


def test_rank_0_decides_and_its_errors_reach_every_rank(one_rank):
    assert from_rank0(lambda: {"step": 4}) == {"step": 4}
    assert all_agree(True, "cpu") and not all_agree(False, "cpu")

    def refuse():
        raise ValueError("another run's checkpoint")

    with pytest.raises(ValueError, match="another run's checkpoint"):
        from_rank0(refuse)


def test_captured_steps_are_refused_or_declined_on_a_sharded_model(one_rank, llama_dir):
    from headsup_lens.data import Task
    from headsup_lens.gates import native_options
    from headsup_lens.objective import greedy_generate
    from headsup_lens.training import TrainConfig, train_mask

    model = load_model(llama_dir, device="cpu", dtype="float32", shard="fsdp")
    task = Task.from_pairs("words", [("cat", "tac"), ("dog", "god"), ("sun", "nus")], n_eval=1)
    with pytest.raises(ValueError, match="cuda_graph=True"):
        train_mask(model, task, TrainConfig(steps=1, cuda_graph=True, progress=False))
    with native_options(static_cache=True), pytest.warns(RuntimeWarning, match="sharded with FSDP"):
        out = greedy_generate(model, random_tokens(model), max_new_tokens=2, stops=set(), mask=random_mask(model))
    assert all(len(tokens) == 2 for tokens in out.tokens)  # decoded eagerly
