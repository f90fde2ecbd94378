"""Mask training: planted pathway, schedules, objective, determinism, variants, checkpoints, resume."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from headsup_lens import load_model
from headsup_lens.data import IGNORE_INDEX, Task, tokenize_pairs
from headsup_lens.evaluation import answer_loss
from headsup_lens.gates import gated
from headsup_lens.masks import HeadMask
from headsup_lens.masks._files import write_safetensors
from headsup_lens.models import verify_readout
from headsup_lens.objective import answer_logits
from headsup_lens.training import TrainConfig, load_trajectory, train_mask, train_masks

from ..validation.refusal import assert_refused
from .planted import build_planted_dir, planted_mask, planted_task

QUICK = dict(steps=60, lr=0.1, min_lr=1e-3, init_mean=2.0, checkpoint_every=0, progress=False)


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    return build_planted_dir(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def planted(planted_dir):
    return load_model(planted_dir, device="cpu", dtype="float32")


def test_planted_pathway_is_recovered(planted):
    task = planted_task()
    original = answer_loss(planted, task)
    result = train_mask(planted, task, TrainConfig(**QUICK))
    agreement = (result.mask.values == planted_mask()).float().mean().item()
    assert agreement >= 0.95, result.mask.values
    masked = answer_loss(planted, task, mask=result.mask)
    assert masked < 0.2 * original  # suppressed answer (~23 nats) -> ~log 2
    history = result.history
    assert list(history.columns) == ["step", "task", "loss", "tau", "lr", "n_kept"] and len(history) == 60
    assert history.loss.iloc[-5:].mean() < 0.2 * history.loss.iloc[:5].mean()
    assert history.n_kept.iloc[0] == 32 and history.n_kept.iloc[-1] == result.mask.n_kept
    assert torch.equal(result.mask.values, (result.mask.logits >= 0).float())


def test_schedules_match_the_paper():
    config = TrainConfig(steps=100)
    assert config.lr_at(0) == pytest.approx(1e-3) and config.lr_at(9) == pytest.approx(1e-2)
    assert config.lr_at(99) == pytest.approx(1e-4)
    assert config.lr_at(54) == pytest.approx(1e-4 + (1e-2 - 1e-4) * 0.5 * (1 + math.cos(math.pi * 44 / 89)))
    assert config.tau_at(0) == 4.0 and config.tau_at(20) == pytest.approx((4.0 + 0.05) / 2)
    assert config.tau_at(40) == config.tau_at(99) == 0.05
    assert TrainConfig.negative_init().init_mean == -3.0 and TrainConfig.fast().steps < 1000
    with pytest.raises(ValueError, match="steps must be > 0, got 0"):
        TrainConfig(steps=0)
    fast = TrainConfig.fast()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.steps = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match=re.escape("min_lr must be in (0, lr], got 1.0")):
        fast.replace(min_lr=1.0)  # checked again: replace builds a new config
    with pytest.raises(ValueError, match="warmup_frac must be in \\[0, 1\\), got 1.0; tau_end must be > 0"):
        TrainConfig(warmup_frac=1.0, tau_end=0.0)  # every field out of range is named at once


def test_answer_logits_equal_full_logits_at_answer_positions(llama):
    batch = tokenize_pairs(llama, [("abc", "Xyz"), ("hello there", "q")])
    mask = torch.ones(2, 8)
    mask[0, 3] = mask[1, 5] = 0
    for gate_mask in (None, mask):
        with torch.no_grad(), gated(llama, gate_mask):
            logits, targets, _rows = answer_logits(llama, batch)
            full = llama(batch.input_ids, attention_mask=batch.attention_mask)
        expected_rows, positions = (batch.labels[:, 1:] != IGNORE_INDEX).nonzero(as_tuple=True)
        torch.testing.assert_close(logits, full[expected_rows, positions])
        assert torch.equal(targets, batch.input_ids[expected_rows, positions + 1])
        reference = F.cross_entropy(
            full[:, :-1].flatten(0, 1), batch.labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX
        )
        torch.testing.assert_close(F.cross_entropy(logits, targets), reference)


def test_deterministic_for_a_seed(planted):
    task = planted_task()
    config = TrainConfig(**{**QUICK, "steps": 15})
    first, second = train_mask(planted, task, config), train_mask(planted, task, config)
    assert torch.equal(first.mask.logits, second.mask.logits)
    other = train_mask(planted, task, config.replace(seed=1))
    assert not torch.equal(first.mask.logits, other.mask.logits)


def test_joint_training_gives_each_task_its_own_mask(planted):
    a, b = planted_task(seed=0), Task.from_pairs("other", planted_task(seed=1).pairs, n_eval=20)
    config = TrainConfig(**{**QUICK, "steps": 20})
    joint = train_masks(planted, [a, b], config)
    assert set(joint) == {"planted", "other"}
    for task in (a, b):
        alone = train_mask(planted, task, config)
        torch.testing.assert_close(joint[task.name].mask.logits, alone.mask.logits, atol=1e-4, rtol=0)
        assert list(joint[task.name].history.task.unique()) == [task.name]


def test_query_gate_and_mlp_slot_train(llama):
    task = Task.from_pairs(
        "t", [(f"w{'abcdefgh'[i % 8]}", "xy") for i in range(10)] + [("wi", "xy"), ("wj", "xy")], n_eval=2
    )
    config = TrainConfig(**{**QUICK, "steps": 3, "init_mean": 0.0, "batch_size": 8})  # of its 10 training pairs
    query = train_mask(llama, task, config.replace(gate="query"))
    assert query.mask.metadata["gate"] == "query" and not torch.equal(query.mask.logits, torch.zeros(2, 8))
    assert query.history.loss.map(math.isfinite).all()
    mlp = train_mask(llama, task, config.replace(mlp=True))
    assert mlp.mask.mlp_values is not None and mlp.mask.mlp_values.shape == (2,)
    assert len(mlp.mask.metadata["mlp_logits"]) == 2


def test_outputs_checkpoints_and_trajectory(planted, tmp_path):
    task = planted_task()
    config = TrainConfig(**{**QUICK, "steps": 20, "checkpoint_every": 5})
    result = train_mask(planted, task, config, out_dir=tmp_path)
    saved = HeadMask.load(tmp_path / "mask.safetensors", planted)
    assert torch.equal(saved.logits, result.mask.logits) and saved.metadata["task"] == "planted"
    assert (tmp_path / "history.csv").read_text().count("\n") == 21
    steps, logits = load_trajectory(tmp_path)
    assert steps == [5, 10, 15, 20] and logits.shape == (4, 4, 8)
    assert torch.equal(logits[-1], result.mask.logits)
    assert not list(tmp_path.rglob("*.tmp"))
    with pytest.raises(ValueError, match=r"recipe.lr \(0.1 there, 0.05 here\)"):
        train_mask(planted, task, config.replace(lr=0.05), out_dir=tmp_path)


def test_a_trajectory_of_checkpoints_of_two_shapes_names_them(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    meta = {"tasks": "planted"}
    write_safetensors(folder / "logits_step0000005.safetensors", {"logits": torch.zeros(1, 4, 8)}, meta)
    write_safetensors(folder / "logits_step0000010.safetensors", {"logits": torch.zeros(1, 2, 4)}, meta)
    message = assert_refused(lambda: load_trajectory(tmp_path), ValueError, "different runs", folder=tmp_path)
    assert "[1, 4, 8]" in message and "logits_step0000005.safetensors" in message
    assert "[1, 2, 4]" in message and "logits_step0000010.safetensors" in message


# TransformerLens warns that the poisoning hook edits the norm's output: that is the point here.
@pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")
def test_nan_loss_stops_with_a_clear_error_and_writes_no_mask(planted, tmp_path):
    def poison(x, hook):
        return x * float("nan")

    # The read-out is checked once per model, on its first loss: here before the poison, whatever
    # ran first (else that check, not the loss's, would refuse the NaN).
    verify_readout(planted)
    with (
        planted.hooks(fwd_hooks=[("ln_final.hook_normalized", poison)]),
        pytest.raises(ValueError, match="loss became nan at step 0"),
    ):
        train_mask(planted, planted_task(), TrainConfig(**QUICK), out_dir=tmp_path)
    assert not (tmp_path / "mask.safetensors").exists()


def test_bad_pair_fails_before_anything_is_written(planted, tmp_path):
    task = Task.from_pairs("empty", [("abc", "X"), ("de", ""), ("fg", "X")], n_eval=1)
    with pytest.raises(ValueError, match="empty after tokenisation"):
        train_mask(planted, task, TrainConfig(**{**QUICK, "batch_size": 2}), out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch
    from headsup_lens import load_model
    from headsup_lens.training import TrainConfig, train_mask
    from tests.training.planted import planted_task
    torch.set_num_threads(1)

    def hold(end):  # after step 11 (the checkpoint of step 10 is on disk): say so and wait to be killed
        if end.step == 11:
            Path(sys.argv[2], "..", "held").resolve().write_text("")
            time.sleep(3600)

    model = load_model(sys.argv[1], device="cpu", dtype="float32")
    config = TrainConfig(steps=40, lr=0.1, min_lr=1e-3, init_mean=2.0, checkpoint_every=10, progress=False)
    train_mask(model, planted_task(), config, out_dir=sys.argv[2], callbacks=[hold])
    """
)


def test_resume_after_sigkill_gives_the_same_mask(planted, planted_dir, tmp_path):
    """Killed mid-way at a known step (the run holds there), not after a time that depends on the machine."""
    config = TrainConfig(steps=40, lr=0.1, min_lr=1e-3, init_mean=2.0, checkpoint_every=10, progress=False)
    reference = train_mask(planted, planted_task(), config)
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(planted_dir), str(out)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stderr=subprocess.DEVNULL,
    )
    held, checkpoint = tmp_path / "held", out / "checkpoints" / "logits_step0000010.safetensors"
    deadline = time.monotonic() + 1800  # against a hang only
    while not held.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert held.exists()
    assert checkpoint.exists() and not (out / "mask.safetensors").exists()  # killed mid-way
    resumed = train_mask(planted, planted_task(), config, out_dir=out)
    assert resumed.history.step.tolist() == list(range(1, 41))
    assert torch.equal(resumed.mask.logits, reference.mask.logits)
    assert resumed.history.loss.tolist() == pytest.approx(reference.history.loss.tolist())


def test_sigterm_between_checkpoints_saves_that_step_and_the_rerun_gives_the_same_mask(planted, tmp_path):
    """SIGTERM (how `kill` or a scheduler stops a background job) at step 7 of checkpoints every 5: the
    state of step 7 is saved (no trajectory point), nothing is lost, and the resumed run is the same."""
    from headsup_lens.cli._train import interrupted_message

    config = TrainConfig(steps=12, lr=0.1, min_lr=1e-3, init_mean=2.0, checkpoint_every=5, progress=False)
    reference = train_mask(planted, planted_task(), config)
    out = tmp_path / "run"
    assert "before the first checkpoint" in interrupted_message(out, 5) and "no saved state" in interrupted_message(
        out, 5
    )

    def stop(end) -> None:
        if end.step == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        train_mask(planted, planted_task(), config, out_dir=out, callbacks=[stop])
    assert torch.load(out / "checkpoints" / "state.pt", weights_only=False)["step"] == 7
    assert sorted(p.name for p in (out / "checkpoints").glob("logits_step*")) == ["logits_step0000005.safetensors"]
    assert "the state of step 7 is saved" in interrupted_message(out, 5)
    resumed = train_mask(planted, planted_task(), config, out_dir=out)
    assert resumed.history.step.tolist() == list(range(1, 13))
    assert torch.equal(resumed.mask.logits, reference.mask.logits)
    assert sorted(p.name for p in (out / "checkpoints").glob("logits_step*")) == [
        "logits_step0000005.safetensors",
        "logits_step0000010.safetensors",
        "logits_step0000012.safetensors",
    ]


def test_gradient_is_clipped_per_task_as_the_papers_trainer_does():
    from headsup_lens.training._train import clip_per_task

    assert TrainConfig().max_grad_norm == 1.0 and "max_grad_norm" in TrainConfig().recipe()
    logits = torch.zeros(2, 3, 4, requires_grad=True)
    mlp = torch.zeros(2, 3, requires_grad=True)
    logits.grad = torch.zeros(2, 3, 4)
    logits.grad[0, 0, 0], logits.grad[1, 0, 0] = 3.0, 0.3
    mlp.grad = torch.zeros(2, 3)
    mlp.grad[0, 1], mlp.grad[1, 1] = 4.0, 0.4  # task norms 5 and 0.5
    clip_per_task([logits, mlp], 1.0)
    assert float(torch.cat([logits.grad[0].flatten(), mlp.grad[0]]).norm()) == pytest.approx(1.0, rel=1e-5)
    assert float(logits.grad[0, 0, 0]) == pytest.approx(0.6, rel=1e-5)  # direction kept
    assert float(torch.cat([logits.grad[1].flatten(), mlp.grad[1]]).norm()) == pytest.approx(0.5, rel=1e-5)


def test_clipping_changes_training_and_can_be_turned_off(planted):
    config = TrainConfig(**{**QUICK, "steps": 10, "max_grad_norm": 1e-3})
    clipped = train_mask(planted, planted_task(), config)
    free = train_mask(planted, planted_task(), config.replace(max_grad_norm=0.0))
    assert not torch.equal(clipped.mask.logits, free.mask.logits)
    with pytest.raises(ValueError, match="max_grad_norm"):
        TrainConfig(max_grad_norm=-1.0)


def test_resume_refuses_a_run_on_other_data_and_names_the_difference(planted, tmp_path):
    config = TrainConfig(**{**QUICK, "steps": 6, "checkpoint_every": 3})
    out = tmp_path / "run"
    train_mask(planted, planted_task(), config.replace(steps=3), out_dir=out)  # a run with 3 of its steps saved
    task = planted_task()
    other = Task.from_pairs(task.name, [(x + "a", y) for x, y in task.pairs], n_eval=task.n_eval)
    with pytest.raises(ValueError, match=r"training data .*--fresh"):
        train_mask(planted, other, config.replace(steps=3), out_dir=out)
    with pytest.raises(ValueError, match=r"recipe.steps \(3 there, 6 here\)"):
        train_mask(planted, task, config, out_dir=out)
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    (out / "checkpoints" / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"state.pt cannot be read .*--fresh"):
        train_mask(planted, task, config.replace(steps=3), out_dir=out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before  # nothing else was written


def test_a_run_that_removes_nothing_warns(planted):
    from headsup_lens.training import TrainingAdvice

    with pytest.warns(TrainingAdvice, match=r"kept (\d+)/\1 heads"):
        train_mask(planted, planted_task(), TrainConfig(steps=5, checkpoint_every=0, progress=False))


def test_passes_grouped_by_length_give_the_one_pass_gradient(qwen2, monkeypatch):
    """A step runs its rows in passes of similar length (less padding); rows are independent, so
    the trained logits and logged losses equal those of one right-padded pass over the step."""
    import headsup_lens.training._train as train_module
    from headsup_lens.data import length_groups

    words = [
        "cold",
        "up the hill and far away over the sea",
        "good",
        "a girl in a red coat on a bike",
        "yes",
        "hot soup",
        "no one ever came back from the old mill by the river",
    ]
    task = Task.from_pairs("mixed", [(w, w.split()[0]) for w in words] * 3, n_eval=0)
    config = TrainConfig(**{**QUICK, "steps": 4, "batch_size": 8})
    passes = []

    def many(model, rows, max_rows=None):
        groups = length_groups([len(p) + len(a) for p, a in rows], overhead=0.0, max_rows=max_rows)
        passes.append(len(groups))
        return groups

    monkeypatch.setattr(train_module, "length_batches", many)
    grouped = train_mask(qwen2, task, config)
    assert min(passes) > 1  # the rows really ran in several passes
    monkeypatch.setattr(train_module, "length_batches", lambda model, rows, max_rows=None: [list(range(len(rows)))])
    single = train_mask(qwen2, task, config)
    torch.testing.assert_close(grouped.mask.logits, single.mask.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        torch.tensor(grouped.history.loss.values), torch.tensor(single.history.loss.values), atol=1e-5, rtol=1e-5
    )


def test_model_weights_stay_frozen_and_get_no_gradient_buffers(planted):
    before = {name: p.detach().clone() for name, p in planted.named_parameters()}
    train_mask(planted, planted_task(), TrainConfig.fast(steps=3, checkpoint_every=0, progress=False))
    for name, parameter in planted.named_parameters():
        assert not parameter.requires_grad and parameter.grad is None, name
        assert torch.equal(parameter, before[name]), name


def test_activation_checkpointing_trains_the_same_mask(planted):
    config = TrainConfig.fast(steps=6, checkpoint_every=0, progress=False)
    plain = train_mask(planted, planted_task(), config)
    checkpointed = train_mask(planted, planted_task(), config.replace(activation_checkpointing=True))
    assert torch.allclose(checkpointed.mask.logits, plain.mask.logits, atol=1e-6)
    assert "activation_checkpointing" not in config.recipe()  # how it runs, not what it computes


@pytest.mark.parametrize("family", ["gemma3", "phi3"])
def test_activation_checkpointing_trains_the_same_mask_beyond_llama(family, family_model):
    """Families the direct pass never served: the same mask with and without checkpointing."""
    model = family_model(family)
    task = Task.from_pairs("t", [(w, w[::-1]) for w in ("cold", "up the hill", "yes", "a red coat")] * 4, n_eval=0)
    config = TrainConfig(steps=4, lr=0.1, init_mean=0.5, init_std=0.0, batch_size=8, checkpoint_every=0, progress=False)
    plain = train_mask(model, task, config)
    checkpointed = train_mask(model, task, config.replace(activation_checkpointing=True))
    torch.testing.assert_close(checkpointed.mask.logits, plain.mask.logits, atol=1e-5, rtol=0)
    assert not torch.equal(plain.mask.logits, torch.full_like(plain.mask.logits, 0.5))  # it trained


def test_activation_checkpointing_is_refused_where_the_bridge_must_run(llama):
    task = Task.from_pairs("t", [("ab", "ba")] * 20, n_eval=0)
    config = TrainConfig(steps=1, activation_checkpointing=True, gate="query", progress=False)
    with pytest.raises(ValueError, match="native forward pass"):
        train_mask(llama, task, config)


def test_reading_losses_back_every_n_steps_changes_nothing(planted, tmp_path):
    """Losses stay on the device between read-backs: the history, checkpoints and mask are the
    same whether they are read back after every step or every 7 (a number that divides neither
    the steps nor the checkpoint interval)."""
    task = planted_task()
    config = TrainConfig(**{**QUICK, "steps": 12, "checkpoint_every": 5})
    every = train_mask(planted, task, config.replace(log_every=1), out_dir=tmp_path / "one")
    seldom = train_mask(planted, task, config.replace(log_every=7), out_dir=tmp_path / "seven")
    assert every.history.equals(seldom.history) and len(seldom.history) == 12
    assert torch.equal(every.mask.logits, seldom.mask.logits)
    assert load_trajectory(tmp_path / "seven")[0] == [5, 10, 12]


def test_log_every_must_be_positive():
    with pytest.raises(ValueError, match="log_every must be >= 1"):
        TrainConfig(log_every=0).validate()


def test_a_resumed_run_keeps_the_optimisers_step_counters_on_the_host(planted, tmp_path, monkeypatch):
    """The resume state is read onto the CPU and `load_state_dict` moves it: AdamW's moments go to the
    logits' device, its step counters stay on the host, where the non-capturable AdamW reads them (on
    a GPU a counter on the device is read back at every step). The `meta` device stands in for a GPU."""
    from headsup_lens.training import _train

    config = TrainConfig(**{**QUICK, "steps": 4, "checkpoint_every": 2})
    train_mask(planted, planted_task(), config, out_dir=tmp_path)
    monkeypatch.setattr(_train, "model_device", lambda model: torch.device("meta"))
    run = _train._MaskRun(planted, [planted_task()], config, single=True, distributed=False)
    assert run.logits.device.type == "meta"
    saved = run.saved_state(tmp_path / _train._CHECKPOINTS / _train._STATE)
    assert saved is not None and run.restore(saved, tmp_path) == 4
    state = run.optimizer.state[run.logits]
    assert state["step"].device.type == "cpu" and float(state["step"]) == 4
    assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
