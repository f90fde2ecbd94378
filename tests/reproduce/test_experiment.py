"""The reproduction runner: options checked first, one model per output folder, the folder lock, one
output set per run, and the mask cache keyed by recipe and model fingerprint."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

import headsup_lens._progress as progress_module
from headsup_lens import FolderInUse, fingerprint, load_model
from headsup_lens._progress import progress, progress_enabled
from headsup_lens.data import Task
from headsup_lens.masks import HeadMask
from headsup_lens.options import Given
from headsup_lens.reproduce import (
    MODEL_RECORD,
    ExperimentOptions,
    cached_masks,
    check_model_record,
    check_options,
    mask_cache,
    model_slug,
    open_experiment,
    output_root,
    record_time,
    run_script,
    weights_id,
)
from headsup_lens.training import TrainConfig

from ..conftest import build_llama_dir

WORDS = ["cat", "dog", "sun", "map", "pen", "cup", "hat", "box", "bag", "egg", "fox", "jam"]


def tiny_task(name: str = "tiny/reverse") -> Task:
    return Task(name, tuple((w, w[::-1]) for w in WORDS), instruction="Reverse: {input}", n_eval=4)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_llama_dir(tmp_path_factory.mktemp("model") / "tiny")


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory) -> Path:
    return build_llama_dir(tmp_path_factory.mktemp("other") / "tiny", seed=1)  # same name, other weights


def options(model_dir: Path, out: Path, **changes) -> ExperimentOptions:
    return replace(ExperimentOptions(model=str(model_dir), out=str(out), steps=3, batch_size=2, png=False), **changes)


def test_output_root_and_model_slug(tmp_path):
    assert output_root(ExperimentOptions(), tmp_path) == tmp_path / "outputs" / "experiments"
    assert output_root(ExperimentOptions(update_figures=True), tmp_path) == tmp_path / "figures"
    assert output_root(ExperimentOptions(out="x"), tmp_path) == Path("x")
    assert output_root(ExperimentOptions(out=str(tmp_path / "figures"), update_figures=True), tmp_path)
    with pytest.raises(ValueError, match="either --out or --update-figures"):
        output_root(ExperimentOptions(out="x", update_figures=True), tmp_path)
    assert model_slug("organism") == "organism" and model_slug("meta-llama/Llama-3.1-8B/") == "Llama-3.1-8B"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schedule": "quick"}, "--schedule must be one of auto, fast, paper"),
        ({"steps": 0}, "--steps must be >= 1"),
        ({"eval_batch_size": 0}, "--eval-batch-size must be >= 1"),
        ({"checkpoint_every": -1}, "--checkpoint-every must be >= 0"),
        ({"masks": "/no/such/folder"}, "--masks /no/such/folder is not a folder"),
    ],
)
def test_bad_options_are_refused_before_any_work_naming_the_option(changes, message):
    from headsup_lens.options import name_options

    with pytest.raises(ValueError) as error:  # the values when the options are built, the folder after
        check_options(replace(ExperimentOptions(), **changes))
    assert name_options(str(error.value), ExperimentOptions, Given()).startswith(message)


def test_a_folder_holds_one_models_outputs(model_dir, other_dir, tmp_path):
    model, other = load_model(str(model_dir)), load_model(str(other_dir))
    check_model_record(tmp_path, model, str(model_dir))
    record = json.loads((tmp_path / MODEL_RECORD).read_text())
    assert record["model"] == "tiny" and record["fingerprint"]["content_hash"] == fingerprint(model).content_hash
    check_model_record(tmp_path, model, "another/name")  # the same weights under another name: accepted
    with pytest.raises(ValueError, match="holds the outputs of model .* not of .*choose another out_dir"):
        check_model_record(tmp_path, other, str(other_dir))
    (tmp_path / MODEL_RECORD).write_text("{")
    with pytest.raises(ValueError, match="is not a model record"):
        check_model_record(tmp_path, model, str(model_dir))


def test_outputs_move_in_together_and_a_failed_run_leaves_the_earlier_ones(model_dir, tmp_path):
    config = options(model_dir, tmp_path)
    with open_experiment("demo_script", config, tmp_path) as xp:
        out = xp.out
        xp.table(pd.DataFrame({"a": [1.0, 2.0]}), "numbers", tiny_task())
        xp.figure(go.Figure(go.Scatter(y=[1, 2])), "curve")
        assert not (out / "numbers_tiny__reverse.csv").exists()  # staged until the run ends
    assert out == tmp_path / "tiny" and (out / MODEL_RECORD).is_file()
    assert pd.read_csv(out / "numbers_tiny__reverse.csv").a.tolist() == [1.0, 2.0]
    # One plotly.min.js in the output root, referenced from where the figure lies (not the staging folder).
    assert (tmp_path / "plotly.min.js").is_file() and not (out / "plotly.min.js").exists()
    assert 'src="../plotly.min.js"' in (out / "curve.html").read_text()
    with pytest.raises(RuntimeError, match="stopped"), open_experiment("demo_script", config, tmp_path) as xp:
        xp.table(pd.DataFrame({"a": [3.0]}), "numbers", tiny_task())
        raise RuntimeError("stopped")
    assert pd.read_csv(out / "numbers_tiny__reverse.csv").a.tolist() == [1.0, 2.0]
    assert not [p for p in out.iterdir() if p.name.startswith(".headsup-staging") or p.name.endswith(".tmp")]


def test_another_model_is_refused_and_a_busy_folder_names_its_holder(model_dir, other_dir, tmp_path):
    with open_experiment("demo_script", options(model_dir, tmp_path), tmp_path) as xp:
        xp.table(pd.DataFrame({"a": [1]}), "numbers")
    with pytest.raises(ValueError, match="holds the outputs of model"):
        open_experiment("demo_script", options(other_dir, tmp_path), tmp_path).__enter__()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys
                from headsup_lens._io import locked_folder
                with locked_folder({str(tmp_path / "tiny")!r}):
                    print("held", flush=True)
                    sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse, match=f"--out .* is in use by pid {holder.pid}"):
            open_experiment("demo_script", options(model_dir, tmp_path), tmp_path).__enter__()
    finally:
        holder.communicate("")
    assert pd.read_csv(tmp_path / "tiny" / "numbers.csv").a.tolist() == [1]


def test_the_mask_cache_trains_once_and_is_keyed_by_recipe_and_fingerprint(model_dir, other_dir, tmp_path, capsys):
    model, other = load_model(str(model_dir)), load_model(str(other_dir))
    config = TrainConfig.fast(steps=3, batch_size=2, progress=False)
    folder = mask_cache(tmp_path, model, config)
    assert folder.parent == tmp_path / "masks" and folder.name.endswith("-" + weights_id(model))
    assert weights_id(model) == fingerprint(model).content_hash.removeprefix("sha256:")[:10]
    assert mask_cache(tmp_path, other, config).name != folder.name  # other weights: another folder
    assert mask_cache(tmp_path, model, config.replace(seed=1)).name != folder.name  # another recipe
    assert mask_cache(tmp_path, model, config.replace(progress=True, checkpoint_every=7)) == folder  # not the result

    tasks = [tiny_task(), tiny_task("tiny/again")]
    first = cached_masks(model, tasks, config, tmp_path, model_name=str(model_dir))
    assert "training value-gate masks for tiny/reverse, tiny/again (3 steps)" in capsys.readouterr().out
    run = first["tiny/reverse"].run_dir
    assert run.parent == folder and json.loads((run / "recipe.json").read_text())["model"] == "tiny"
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    again = cached_masks(model, tasks[:1], config, tmp_path, model_name=str(model_dir))
    assert capsys.readouterr().out == ""  # found, not retrained
    assert torch_equal(again["tiny/reverse"].mask, first["tiny/reverse"].mask)
    assert stamps == {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}


def torch_equal(a: HeadMask, b: HeadMask) -> bool:
    return bool((a.values == b.values).all()) and bool((a.logits == b.logits).all())


def test_record_time_appends_rows(tmp_path, capsys):
    record_time(tmp_path, "stage", "first", 1.23)
    record_time(tmp_path, "stage", "second", 4.56)
    table = pd.read_csv(tmp_path / "times.csv")
    assert table.what.tolist() == ["first", "second"] and table.seconds.tolist() == [1.2, 4.6]
    assert "[stage] second: 4.6 s" in capsys.readouterr().out


def test_tasks_default_to_the_organisms_and_a_task_is_required_elsewhere(model_dir, tmp_path):
    with open_experiment("demo_script", options(model_dir, tmp_path), tmp_path) as xp:
        with pytest.raises(ValueError, match="--task is required for --model"):
            xp.task()
        xp.options = dataclasses.replace(xp.options, task="organism/reverse")
        assert [t.name for t in xp.tasks()] == ["organism/reverse"]
        assert xp.train_config().steps == 3 and xp.train_config(negative=True).init_mean == -3.0
        assert xp.train_config().lr == TrainConfig.paper().lr  # not the organism: the paper's schedule


def test_no_progress_silences_every_bar_of_a_script_and_only_for_its_run(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "_SWITCH", [None])

    def run(xp, options) -> None:
        for _ in progress(range(3), desc="script phase", unit="step"):
            pass

    script = tmp_path / "experiments" / "phase.py"
    argv = ["--model", str(model_dir), "--out", str(tmp_path / "out"), "--no-png"]
    run_script(script, ExperimentOptions, run, argv)
    assert "script phase: 100%" in capsys.readouterr().err
    run_script(script, ExperimentOptions, run, [*argv, "--no-progress"])
    assert "script phase" not in capsys.readouterr().err
    assert progress_enabled()  # the switch is back on once the script's run ends


def test_a_table_stored_gzipped_is_read_by_its_plain_name_and_stays_gzipped(tmp_path):
    """Long tables are committed as `<name>.csv.gz`: every reader finds them under `<name>.csv`, and a
    rerun that writes the table again writes it compressed, leaving no plain twin beside it."""
    import gzip

    from headsup_lens._io import OutputSet, read_table, stored_table
    from headsup_lens.reproduce import Experiment, ExperimentOptions

    out = tmp_path / "organism"
    out.mkdir()
    frame = pd.DataFrame({"output": ["a,b", "c"], "strict": [True, False]})
    frame.to_csv(out / "tables12_generations_t.csv.gz", index=False, compression="gzip")
    assert stored_table(out / "tables12_generations_t.csv") == out / "tables12_generations_t.csv.gz"
    pd.testing.assert_frame_equal(read_table(out / "tables12_generations_t.csv"), frame)
    xp = Experiment("x", ExperimentOptions(), load_model("organism"), out, OutputSet(out, "x"))
    assert xp.current("tables12_generations_t.csv") == out / "tables12_generations_t.csv.gz"
    assert [p.name for p in xp.files("tables12_generations_*.csv")] == ["tables12_generations_t.csv.gz"]
    again = frame.assign(strict=[True, True])
    assert xp.table(again, "tables12_generations_t", float_format=None).name == "tables12_generations_t.csv.gz"
    xp.commit()
    assert not (out / "tables12_generations_t.csv").exists()
    with gzip.open(out / "tables12_generations_t.csv.gz", "rt") as stored:
        pd.testing.assert_frame_equal(pd.read_csv(stored), again)


def test_cross_task_swaps_evaluate_every_mask_on_every_task_and_combine_one_row_per_pair(model_dir, tmp_path):
    """Each mask's table holds its row on every task; the combined table reads those tables only (not
    the gzipped generations beside them), so a second run adds nothing twice."""
    import torch

    from headsup_lens.reproduce._controls import cross_task_stage

    tasks = [tiny_task("tiny/reverse"), Task("tiny/copy", tuple((w, w) for w in WORDS), "Copy: {input}", n_eval=4)]
    for run in range(2):
        with open_experiment("demo_script", options(model_dir, tmp_path), tmp_path) as xp:
            n_layers, n_heads = xp.model.cfg.n_layers, xp.model.cfg.n_heads
            masks = {
                task.name: HeadMask(torch.ones(n_layers, n_heads).index_fill_(1, torch.tensor([i]), 0.0))
                for i, task in enumerate(tasks)
            }
            table = cross_task_stage(xp, tasks, masks, batch_size=2, redo=run == 1, title="tiny")
        assert sorted(zip(table.mask_task, table.task)) == sorted((a.name, b.name) for a in tasks for b in tasks)
    stored = pd.read_csv(tmp_path / "tiny" / "cross_task.csv")
    assert len(stored) == 4 and set(stored.n_kept) == {n_layers * n_heads - n_layers}
    assert (tmp_path / "tiny" / "cross_task_generations_tiny__reverse.csv.gz").is_file()


def test_another_seeds_random_masks_have_their_own_tables_and_rows_of_the_summary(model_dir, tmp_path):
    """`controls --seed 1`: the random masks drawn to seed 1's mask are `random_masks_seed1_<task>`,
    which the verdicts read; the combined summary holds both seeds' rows, each with its `seed`."""
    import torch

    from headsup_lens.reproduce._controls import combine_controls, random_masks_stage

    task = tiny_task("tiny/reverse")
    with open_experiment("demo_script", options(model_dir, tmp_path), tmp_path) as xp:
        n_layers, n_heads = xp.model.cfg.n_layers, xp.model.cfg.n_heads
        mask = HeadMask(torch.ones(n_layers, n_heads).index_fill_(1, torch.tensor([0]), 0.0))
        for seed in (0, 1):
            random_masks_stage(xp, task, mask, n_draws=2, batch_size=2, seed=seed)
        combine_controls(xp)
    out = tmp_path / "tiny"
    own = pd.read_csv(out / "random_masks_seed1_tiny__reverse.csv")
    assert (own["mask"] == "random").sum() == 2 and (
        out / "random_masks_generations_seed1_tiny__reverse.csv.gz"
    ).is_file()
    summary = pd.read_csv(out / "random_masks_summary.csv")
    for seed, own_summary in (
        (0, "random_masks_summary_tiny__reverse.csv"),
        (1, "random_masks_summary_seed1_tiny__reverse.csv"),
    ):
        rows = summary[summary.seed == seed].drop(columns="seed").reset_index(drop=True)
        pd.testing.assert_frame_equal(rows, pd.read_csv(out / own_summary))
    assert list(summary.task.unique()) == ["tiny/reverse"]


def test_a_run_folder_inside_a_figures_tree_shares_its_plotly_js(model_dir, tmp_path):
    """`--out figures/<model>/paper_schedule/<run>/step<N>`: the figures use the tree's one
    plotly.min.js above the output root instead of writing a second copy."""
    (tmp_path / "plotly.min.js").write_text("// the tree's copy")
    root = tmp_path / "tiny" / "run" / "step10"
    with open_experiment("demo_script", options(model_dir, root), root) as xp:
        out = xp.out
        xp.figure(go.Figure(go.Scatter(y=[1, 2])), "curve")
    assert sorted(tmp_path.rglob("plotly.min.js")) == [tmp_path / "plotly.min.js"]
    assert 'src="../../../../plotly.min.js"' in (out / "curve.html").read_text()
