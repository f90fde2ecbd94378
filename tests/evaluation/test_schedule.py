"""The schedule curve: accuracy and answer loss of a run's checkpoints at chosen steps."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from headsup_lens import HeadMask, TrainConfig, train_mask
from headsup_lens.data import Task
from headsup_lens.evaluation import accuracy, answer_loss, is_echo, is_strict, schedule_curve
from headsup_lens.training import load_trajectory

WORDS = ["abc", "hello", "q", "longer", "xy", "Mixed", "zz", "tail", "cat", "dog"]


def test_schedule_curve_reads_each_checkpoint_as_a_mask(llama, tmp_path):
    task = Task.from_pairs("words", [(w, w[::-1]) for w in WORDS], n_eval=4)
    config = TrainConfig.fast(steps=7, batch_size=2, checkpoint_every=2, progress=False)
    train_mask(llama, task, config, out_dir=tmp_path)
    seen = []
    curve = schedule_curve(
        llama,
        task,
        tmp_path,
        steps=(2, 4, 5, 300),
        batch_size=3,
        metrics={"extra": lambda m, t, mask, texts: seen.append(len(texts)) or 0.5},
    )
    assert curve.table.step.tolist() == [2, 4, 7]  # 5 and 300 have no checkpoint; 7 is the latest
    saved, logits = load_trajectory(tmp_path)
    for row in curve.table.itertuples():
        mask = HeadMask.from_logits(logits[saved.index(row.step)])
        assert row.heads_kept == mask.n_kept and row.n == 4 and row.extra == 0.5
        assert row.accuracy == accuracy(llama, task, mask=mask)
        texts = curve.generations[curve.generations.step == row.step]
        assert (
            row.strict
            == sum(is_strict(g, a) for g, a in zip(texts.generation, texts.answer)) / 4
            == texts.strict.mean()
        )
        assert row.echo == sum(is_echo(g, x) for g, x in zip(texts.generation, texts.input)) == texts.echo.sum()
        assert row.accuracy_low <= row.accuracy <= row.accuracy_high
        assert row.answer_nll == pytest.approx(answer_loss(llama, task, mask=mask), rel=1e-6)
    assert seen == [4, 4, 4]
    assert len(curve.generations) == 12 and set(curve.generations.step) == {2, 4, 7}
    assert curve.generations.input.tolist()[:4] == [x for x, _ in task.eval_pairs]
    assert not torch.equal(logits[0], logits[-1])
    assert schedule_curve(llama, task, tmp_path, steps=(4,), latest=False).table.step.tolist() == [4]
    with pytest.raises(ValueError, match="none of the steps"):
        schedule_curve(llama, task, tmp_path, steps=(5,), latest=False)
    # Each step's mask where `--masks <run>/step_masks/step<N>` finds it, and the figure of the table.
    written = curve.save_masks(tmp_path, task.name)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        f"step_masks/step{step}/words.safetensors" for step in (2, 4, 7)
    ]
    for step, path in zip((2, 4, 7), written):
        assert torch.equal(HeadMask.load(path).values, HeadMask.from_logits(logits[saved.index(step)]).values)
    from headsup_lens.plots import schedule_curve_figure

    figure = schedule_curve_figure(curve.table, title="t")
    assert [trace.name for trace in figure.data] == ["paper matcher", "strict", "answer loss"]
    assert list(figure.data[0].x) == [2, 4, 7] and list(figure.data[2].y) == curve.table.answer_nll.tolist()
    with pytest.raises(ValueError, match="not a schedule_curve table"):
        schedule_curve_figure(curve.table.drop(columns="strict"))


def test_a_run_trained_on_other_weights_is_refused(llama, tmp_path):
    """The masks of a run are stamped with the model given: a run of another model is refused, by
    its training state's identity or, without it, by its checkpoint files' metadata."""
    from headsup_lens import load_model
    from headsup_lens.masks._files import read_safetensors, write_safetensors

    from ..conftest import build_llama_dir

    task = Task.from_pairs("words", [(w, w[::-1]) for w in WORDS], n_eval=4)
    run = tmp_path / "run"
    train_mask(llama, task, TrainConfig.fast(steps=2, batch_size=2, checkpoint_every=1, progress=False), out_dir=run)
    other = load_model(build_llama_dir(tmp_path / "other", seed=5), device="cpu", dtype="float32")
    with pytest.raises(ValueError, match=r"trained on another model: .*state\.pt records"):
        schedule_curve(other, task, run, steps=(1,))
    (run / "checkpoints" / "state.pt").unlink()
    with pytest.raises(ValueError, match=r"trained on another model: .*logits_step0000001\.safetensors records"):
        schedule_curve(other, task, run, steps=(1,))
    for path in (run / "checkpoints").glob("*.safetensors"):  # checkpoints as written before they named the model
        tensors, metadata = read_safetensors(path)
        write_safetensors(path, tensors, {k: v for k, v in metadata.items() if k != "model"})
    with pytest.raises(ValueError, match=r"trained on another model: .*mask\.safetensors records"):
        schedule_curve(other, task, run, steps=(1,))
    (run / "mask.safetensors").rename(tmp_path / "mask.safetensors")
    with pytest.warns(UserWarning, match="records no model identity"):
        schedule_curve(llama, task, run, steps=(1,), progress=False)
    (tmp_path / "mask.safetensors").rename(run / "mask.safetensors")
    out = tmp_path / "curve"
    curve = schedule_curve(llama, task, run, steps=(1,), progress=False, out_dir=out)  # its own model
    assert curve.table.step.tolist() == [1, 2]
    written = pd.read_csv(out / "schedule_curve.csv")
    pd.testing.assert_frame_equal(written, curve.table, check_dtype=False)
    assert len(pd.read_csv(out / "schedule_generations.csv")) == 2 * 4
    assert json.loads((out / "schedule_curve.json").read_text())["task"] == "words"
    assert not (out / ".headsup.lock").exists()
