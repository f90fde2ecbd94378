"""The time estimate of `headsup train`: timed steps, within 2x of what a run really takes."""

from __future__ import annotations

import time
import warnings

import pytest
import torch

from headsup_lens.cli._train import resolve_preset
from headsup_lens.data import load_task
from headsup_lens.models import load_model
from headsup_lens.training import TrainConfig, TrainingAdvice, seconds_per_step, train_masks


@pytest.fixture(scope="module")
def organism():
    return load_model("organism", device="cpu")


@pytest.mark.slow  # compares two timings: on a busy machine either one can be slowed alone
def test_estimate_is_within_2x_of_the_measured_step_time_on_the_organism(organism):
    torch.set_num_threads(1)
    task = load_task("organism/reverse")
    config = TrainConfig(batch_size=4, progress=False, checkpoint_every=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingAdvice)  # the timed steps give no advice of their own
        estimate = seconds_per_step(organism, [task], config)
    steps = 20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingAdvice)
        train_masks(organism, [task], config.replace(steps=2))  # the same warm start as the estimate's
        start = time.perf_counter()
        train_masks(organism, [task], config.replace(steps=steps))
    measured = (time.perf_counter() - start) / steps
    assert estimate > 0
    assert measured / 2 <= estimate <= 2 * measured, (estimate, measured)


def test_no_progress_wins_over_the_preset():
    config = resolve_preset("paper", TrainConfig(progress=False), {"progress"})
    assert config.progress is False
    assert resolve_preset("paper", TrainConfig(progress=True), set()).progress is True
