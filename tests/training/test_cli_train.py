"""`headsup train` and `headsup evaluate` end to end on the planted model."""

from __future__ import annotations

import pandas as pd
import pytest

from headsup_lens.cli import main
from headsup_lens.cli._train import resolve_preset
from headsup_lens.data import register_task, task_names
from headsup_lens.masks import HeadMask
from headsup_lens.training import TrainConfig

from ..conftest import build_gpt2_dir
from .planted import build_planted_dir, planted_mask, planted_task


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    if "test/planted" not in task_names():
        register_task("test/planted", lambda data_dir: planted_task())
    return build_planted_dir(tmp_path_factory.mktemp("planted"))


def test_presets_fill_only_paper_defaults():
    fast = resolve_preset("fast", TrainConfig(seed=3, steps=40))
    assert fast.steps == 40 and fast.seed == 3 and fast.lr == TrainConfig.fast().lr
    assert resolve_preset("negative", TrainConfig()).init_mean == -3.0
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_preset("quick", TrainConfig())


def test_train_then_evaluate(planted_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "test/planted", "--out", str(out), "--model", str(planted_dir),
                 "--device", "cpu", "--preset", "fast", "--steps", "60", "--progress", "false"]) == 0
    mask = HeadMask.load(out / "mask.safetensors")
    assert (mask.values == planted_mask()).float().mean() >= 0.95
    assert len(pd.read_csv(out / "history.csv")) == 60 and (out / "train_config.json").is_file()
    assert main(["evaluate", "--task", "test/planted", "--mask", str(out / "mask.safetensors"),
                 "--out", str(out), "--model", str(planted_dir), "--device", "cpu"]) == 0
    table = pd.read_csv(out / "results.csv").set_index("setting")
    assert table.loc["masked", "accuracy"] == 1.0 and table.loc["original", "accuracy"] == 0.0


def test_bad_inputs_write_nothing(planted_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "no-such-task", "--out", str(out), "--model", str(planted_dir)]) == 2
    assert "unknown task 'no-such-task'" in capsys.readouterr().err and not out.exists()
    other = build_gpt2_dir(tmp_path / "gpt2")
    from headsup_lens import load_model

    HeadMask.full(load_model(other, device="cpu")).save(tmp_path / "gpt2.safetensors")
    assert main(["evaluate", "--task", "test/planted", "--mask", str(tmp_path / "gpt2.safetensors"),
                 "--out", str(out), "--model", str(planted_dir), "--device", "cpu"]) == 2
    assert "does not fit model" in capsys.readouterr().err and not out.exists()
    assert main(["evaluate", "--task", "test/planted", "--mask", str(tmp_path / "none.safetensors"),
                 "--out", str(out), "--model", str(planted_dir)]) == 2
    assert "no mask file" in capsys.readouterr().err and not out.exists()
