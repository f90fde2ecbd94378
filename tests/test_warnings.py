"""Library warnings name the caller's line, not a frame inside the package or its type-check wrappers."""

from __future__ import annotations

import warnings

import pytest

import headsup_lens as hl
from headsup_lens import HeadMask, TrainConfig, load_model
from headsup_lens.training import TrainingAdvice

from .training.planted import build_planted_dir, planted_mask, planted_task


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return load_model(build_planted_dir(tmp_path_factory.mktemp("planted")), device="cpu", dtype="float32")


def _warned_from(category, call) -> str:
    """The one file every warning of `category` raised by `call` names."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    [filename] = {w.filename for w in caught if issubclass(w.category, category)}
    return filename


def test_training_advice_points_at_the_callers_line(planted):
    config = TrainConfig(steps=3, checkpoint_every=0, progress=False)
    assert _warned_from(TrainingAdvice, lambda: hl.train_mask(planted, planted_task(), config)) == __file__


def test_a_mask_for_another_task_warns_at_the_callers_line(planted):
    mask = HeadMask(planted_mask(), metadata={"task": "another task"})
    assert (
        _warned_from(UserWarning, lambda: hl.evaluate(planted, planted_task(), mask, hl.EvalConfig(generate=False)))
        == __file__
    )
