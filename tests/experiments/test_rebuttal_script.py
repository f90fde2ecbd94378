"""The rebuttal's experiments as their users run them (subprocesses, the built-in organism): the
training-overhead rows of the three methods, and tasks per head over a folder of masks."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from headsup_lens.masks import HeadMask

from ..conftest import run_script


def test_overhead_times_the_three_methods_and_keeps_other_rows(tmp_path):
    out = tmp_path / "rebuttal"
    out.mkdir()
    pd.DataFrame([{"method": "mask", "model": "other", "seconds_per_step": 9.0}]).to_csv(
        out / "overhead.csv", index=False
    )
    args = ["overhead", "--models", "organism", "--task", "organism/reverse", "--steps", "3", "--warmup", "1"]
    run_script("rebuttal.py", *args, "--batch-size", "4", "--out", str(out))
    table = pd.read_csv(out / "overhead.csv").set_index(["model", "method"])
    assert table.loc[("other", "mask"), "seconds_per_step"] == 9.0  # another model's row stays
    rows = table.loc["organism"]
    assert set(rows.index) == {"mask", "lora r=8", "full"}
    assert rows.loc["mask", "trainable_parameters"] == 8 * 16  # the organism's heads: one logit each
    assert rows.loc["full", "trainable_parameters"] == rows.loc["full", "parameters"]
    # LoRA on q, k, v and o: r x (d_in + d_out) per projection and layer
    assert 0 < rows.loc["lora r=8", "trainable_parameters"] < rows.loc["full", "parameters"] / 10
    assert (rows.seconds_per_step > 0).all() and (rows.peak_gib >= rows.loaded_gib).all()
    assert rows.examples_per_second.tolist() == pytest.approx((4 / rows.seconds_per_step).tolist())
    assert (rows.timed_steps == 2).all()


def test_tasks_per_head_counts_the_masks_keeping_each_head(tmp_path):
    folder = tmp_path / "figures" / "organism" / "fast_masks"
    folder.mkdir(parents=True)
    keep = torch.zeros(3, 8, 16)
    keep[0, :4] = 1  # task a keeps layers 0-3
    keep[1, 2:] = 1  # task b keeps layers 2-7
    keep[2, 2:4, :8] = 1  # task c keeps half of layers 2-3
    for name, values in zip("abc", keep):
        HeadMask(values, metadata={"task": name, "steps": 300, "batch_size": 16, "seed": 0}).save(
            folder / f"{name}.safetensors"
        )
    out = tmp_path / "rebuttal"
    run_script(
        "rebuttal.py",
        "tasks-per-head",
        "--models",
        "organism",
        "--figures",
        str(tmp_path / "figures"),
        "--out",
        str(out),
        "--no-png",
    )
    row = pd.read_csv(out / "tasks_per_head.csv").iloc[0]
    assert row.n_tasks == 3 and row.n_heads == 128
    assert row.avg_tasks_per_head == pytest.approx(float(keep.sum(0).mean()))
    assert row.share_of_heads_used_by_no_task == 0.0 and row.share_of_heads_used_by_every_task == pytest.approx(
        16 / 128
    )
    per_head = pd.read_csv(out / "tasks_per_head_map_organism.csv")
    assert per_head.n_tasks.tolist() == keep.sum(0).flatten().int().tolist()
    assert (out / "tasks_per_head_organism.html").is_file()


def test_masks_of_different_schedules_are_refused(tmp_path):
    folder = tmp_path / "figures" / "organism" / "fast_masks"
    folder.mkdir(parents=True)
    for name, steps in (("a", 300), ("b", 6250)):
        HeadMask(torch.ones(8, 16), metadata={"steps": steps, "batch_size": 16, "seed": 0}).save(
            folder / f"{name}.safetensors"
        )
    done = run_script(
        "rebuttal.py",
        "tasks-per-head",
        "--models",
        "organism",
        "--figures",
        str(tmp_path / "figures"),
        "--out",
        str(tmp_path / "r"),
        expect=2,
    )
    assert "different schedules" in done.stderr and done.stderr.count("\n") == 1


def test_a_damaged_mask_or_another_models_mask_is_one_line_naming_it(tmp_path):
    folder = tmp_path / "figures" / "organism" / "fast_masks"
    folder.mkdir(parents=True)
    metadata = {"steps": 300, "batch_size": 16, "seed": 0}
    HeadMask(torch.ones(8, 16), metadata=metadata).save(folder / "a.safetensors")
    args = ["tasks-per-head", "--models", "organism", "--figures", str(tmp_path / "figures"), "--out", str(tmp_path)]
    for name, write in {
        "cut": lambda path: path.write_bytes((folder / "a.safetensors").read_bytes()[:100]),
        "other": lambda path: HeadMask(torch.ones(2, 3), metadata=metadata).save(path),
    }.items():
        path = folder / f"{name}.safetensors"
        write(path)
        done = run_script("rebuttal.py", *args, expect=2)
        err = done.stderr
        assert err.startswith("rebuttal: error: ") and err.count("\n") == 1, err
        assert str(path) in err and "Traceback" not in err, err
        path.unlink()
    assert not (tmp_path / "tasks_per_head.csv").exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [("--task", "organism/nope", "organism/nope"), ("--models", "organsim", "organsim")],
)
def test_overhead_refuses_an_unknown_task_or_model_in_one_line(tmp_path, option, value, message):
    done = run_script("rebuttal.py", "overhead", option, value, "--steps", "3", "--out", str(tmp_path), expect=2)
    assert done.stderr.startswith("rebuttal: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "overhead.csv").exists()
