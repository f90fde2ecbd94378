"""The time estimate of `headsup train`: the median of timed steps of a short run."""

from __future__ import annotations

import warnings

import pytest

from headsup_lens.cli._train import resolve_preset
from headsup_lens.data import load_task
from headsup_lens.models import load_model
from headsup_lens.training import StepEnd, TrainConfig, TrainingAdvice, seconds_per_step


@pytest.fixture(scope="module")
def organism():
    return load_model("organism", device="cpu")


def test_estimate_is_the_median_of_the_timed_steps_after_the_warm_up(organism, monkeypatch):
    """The estimate skips the warm-up steps (first calls pay for allocation and caches) and takes the
    median of the timed ones, from a short run of the same config: checked on step times given by a
    stand-in trainer, so that no wall clock decides the test."""
    calls = []

    def trainer(model, tasks, config, *, callbacks):
        calls.append(config)
        for done, seconds in enumerate([9.0, 7.0, 1.0, 4.0, 2.0, 100.0, 3.0], start=1):
            for callback in callbacks:
                callback(StepEnd(step=done, seconds=seconds))

    monkeypatch.setattr("headsup_lens.training._estimate.train_masks", trainer)
    task = load_task("organism/reverse")
    config = TrainConfig(batch_size=4, steps=300, progress=True, checkpoint_every=50)
    assert seconds_per_step(organism, [task], config) == 3.0  # median of 1, 4, 2, 100, 3
    assert seconds_per_step(organism, [task], config, warmup_steps=0, timed_steps=7) == 4.0
    # The short run: warm-up plus timed steps, quiet, no checkpoints; the rest of the config as given.
    assert calls[0] == config.replace(steps=7, progress=False, checkpoint_every=0)
    with pytest.raises(ValueError, match="timed_steps >= 1"):
        seconds_per_step(organism, [task], config, timed_steps=0)


def test_estimate_times_real_steps_of_the_organism(organism):
    """Through the real trainer the estimate is a positive, finite time (its size depends on the
    machine and its load, so it is not bounded here)."""
    task = load_task("organism/reverse")
    config = TrainConfig(batch_size=4, progress=False, checkpoint_every=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingAdvice)  # the timed steps give no advice of their own
        estimate = seconds_per_step(organism, [task], config, timed_steps=2)
    assert 0 < estimate < float("inf")


def test_no_progress_wins_over_the_preset():
    config = resolve_preset("paper", TrainConfig(progress=False), {"progress"})
    assert config.progress is False
    assert resolve_preset("paper", TrainConfig(progress=True), set()).progress is True


def test_the_estimate_includes_the_work_a_step_queues_on_its_device(organism, monkeypatch):
    """On a GPU `step()` returns before the device has run it: the trainer hands the loop its device's
    synchronizer, which the timed steps wait on. A stand-in device whose queued work takes `QUEUED`
    seconds to finish: every timed step lasts at least that long (a lower bound that holds by
    construction: the stand-in sleeps), and the device is waited on before and after each step."""
    import time

    from headsup_lens.training import _train

    queued = 0.05
    waits: list[float] = []

    def stand_in(device):
        def wait():
            waits.append(time.perf_counter())
            time.sleep(queued)

        return wait

    monkeypatch.setattr(_train, "synchronizer", stand_in)
    task = load_task("organism/reverse")
    config = TrainConfig(batch_size=2, progress=False, checkpoint_every=0)
    estimate = seconds_per_step(organism, [task], config, warmup_steps=1, timed_steps=2)
    assert len(waits) == 2 * 3  # before and after each of the 3 steps
    assert estimate >= queued
