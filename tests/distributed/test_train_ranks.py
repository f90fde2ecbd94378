"""Mask training over two gloo ranks (CPU processes) gives the mask of one process with the same
global batch: each rank computes half of every step's rows, the gradients are summed."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.multiprocessing as mp

from headsup_lens import load_model
from headsup_lens.training import TrainConfig, train_masks

from ..training.planted import build_planted_dir, planted_task
from .test_sweep_ranks import free_port

CONFIG = dict(steps=12, batch_size=6, lr=0.1, min_lr=1e-3, init_mean=2.0, checkpoint_every=0, progress=False)


def tasks():
    from headsup_lens.data import Task

    first = planted_task(seed=0)
    return [first, Task.from_pairs("other", planted_task(seed=1).pairs, n_eval=20)]


def train_on_rank(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = load_model(model_dir, device="cpu", dtype="float32")
        results = train_masks(model, tasks(), TrainConfig(**CONFIG), distributed=True, out_dir=f"{out_dir}/run")
        with open(f"{out_dir}/rank{rank}.pkl", "wb") as handle:
            pickle.dump({name: (r.mask.logits, r.history) for name, r in results.items()}, handle)
    finally:
        dist.destroy_process_group()


def test_two_ranks_train_the_mask_of_one_process(tmp_path):
    model_dir = build_planted_dir(tmp_path / "model")
    mp.spawn(train_on_rank, args=(2, free_port(), str(model_dir), str(tmp_path)), nprocs=2, join=True)
    model = load_model(model_dir, device="cpu", dtype="float32")
    single = train_masks(model, tasks(), TrainConfig(**CONFIG))
    for rank in range(2):
        with open(tmp_path / f"rank{rank}.pkl", "rb") as handle:
            split = pickle.load(handle)
        for name, result in single.items():
            logits, history = split[name]
            assert torch.allclose(logits, result.mask.logits, atol=1e-4), name
            assert torch.equal(logits >= 0, result.mask.logits >= 0)  # the same hard mask
            # The logged loss is the global batch's (a rank that ran every row would log twice as much).
            assert history.loss.tolist() == pytest.approx(result.history.loss.tolist(), rel=1e-4)
    assert (tmp_path / "run" / "masks" / "other.safetensors").is_file()  # written once, by rank 0


def train_other_task_on_rank(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    """Rank 0 trains `planted`, rank 1 `other` (a job started with another --task on one rank)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = load_model(model_dir, device="cpu", dtype="float32")
        steps = {**CONFIG, "steps": 2} if rank == 0 else {**CONFIG, "steps": 3}
        messages = []
        try:
            train_masks(
                model, tasks()[rank : rank + 1], TrainConfig(**steps), distributed=True, out_dir=f"{out_dir}/run"
            )
            messages.append("trained")
        except ValueError as error:
            messages.append(str(error))
        from headsup_lens.evaluation import EvalConfig, evaluate
        from headsup_lens.masks import HeadMask

        try:  # the same for an evaluation
            config = EvalConfig(settings=("original",), generate=False, progress=False)
            evaluate(model, tasks()[rank], HeadMask.full(model), config, distributed=True, out_dir=f"{out_dir}/eval")
            messages.append("evaluated")
        except ValueError as error:
            messages.append(str(error))
        message = "\n".join(messages)
        with open(f"{out_dir}/rank{rank}.txt", "w") as handle:
            handle.write(message)
    finally:
        dist.destroy_process_group()


def test_ranks_on_different_tasks_or_options_are_refused_before_the_first_step(tmp_path):
    model_dir = build_planted_dir(tmp_path / "model")
    mp.spawn(train_other_task_on_rank, args=(2, free_port(), str(model_dir), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        trained, evaluated = (tmp_path / f"rank{rank}.txt").read_text().split("\n")
        assert trained.startswith("the ranks of this job would run different trainings: rank 1 differs from rank 0 in")
        assert "tasks" in trained and "recipe.steps (2 there, 3 here)" in trained, trained
        assert evaluated.startswith("the ranks of this job would run different evaluations: rank 1 differs from")
        assert "task ('planted' there, 'other' here)" in evaluated, evaluated
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "mask.safetensors").exists()
    assert not (tmp_path / "eval" / "results.csv").exists()
