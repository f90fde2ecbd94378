"""The paper's translation recipe: XNLI tasks carry 6 190 steps, which the paper preset uses."""

from __future__ import annotations

import dataclasses

import pytest

from headsup_lens.cli._train import resolve_preset, task_steps
from headsup_lens.data import Task, translation_task
from headsup_lens.training import TrainConfig


def _tasks(data):
    xnli = translation_task("en", "zh", data)
    plain = Task.from_pairs("plain", [("a", "b"), ("c", "d"), ("e", "f"), ("g", "h")])
    return xnli, plain


def test_xnli_tasks_carry_the_paper_recipe(shared_data_dir):
    xnli, _ = _tasks(shared_data_dir)
    assert xnli.paper_steps == 6190 and xnli.max_new_tokens == 50 and xnli.target_language == "zh"
    assert xnli.user_text("I am home.", instructed=True) == "I am home.\n\nTranslate into Chinese:"
    assert xnli.n_eval == 100 and xnli.n_train == 9899
    assert TrainConfig().steps == 6250  # the default recipe (and runs in progress) are unchanged


def test_paper_preset_takes_the_task_steps_unless_steps_are_given(shared_data_dir):
    xnli, plain = _tasks(shared_data_dir)
    paper = resolve_preset("paper", TrainConfig(), set())
    assert task_steps("paper", paper, [xnli], set()).steps == 6190
    assert task_steps("paper", paper, [xnli, xnli], set()).steps == 6190
    assert task_steps("paper", paper, [plain], set()).steps == 6250
    given = resolve_preset("paper", TrainConfig(steps=100), {"steps"})
    assert task_steps("paper", given, [xnli], {"steps"}).steps == 100
    fast = resolve_preset("fast", TrainConfig(), set())
    assert task_steps("fast", fast, [xnli], set()).steps == 300
    with pytest.raises(ValueError, match="--steps"):
        task_steps("paper", paper, [xnli, plain], set())
    other = dataclasses.replace(xnli, name="other", paper_steps=100)
    with pytest.raises(ValueError, match="different paper step counts"):
        task_steps("paper", paper, [xnli, other], set())


def test_iwslt_and_fewshot_keep_the_translation_marks(shared_data_dir):
    from headsup_lens.data import fewshot, iwslt_task

    iwslt = iwslt_task("en", "de", shared_data_dir)
    assert iwslt.target_language == "de" and iwslt.max_new_tokens == 50 and iwslt.paper_steps is None
    assert iwslt.user_text("x", instructed=True) == "x\n\nTranslate into de:"  # the reference's Table 8 prompt
    shots = fewshot(translation_task("en", "fr", shared_data_dir, max_pairs=40, n_eval=10), k=2, dev=5)
    assert shots.target_language == "fr" and shots.paper_steps == 6190 and shots.has_shots
