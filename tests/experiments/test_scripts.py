"""Reproduction scripts run end to end, as subprocesses, on a tiny model with planted sets and tiny
settings: their outputs, the masks they share through the cache, one output set per run. The logic
behind them is tested in the library (`tests/reproduce/`, `tests/analysis/`, ...)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from headsup_lens.evaluation._plan import AnalysisPlan
from headsup_lens.masks import HeadMask
from headsup_lens.reproduce import MODEL_RECORD

from ..conftest import build_llama_dir, load_script, run_script

ROOT = Path(__file__).resolve().parents[2]

TINY = ["--steps", "12", "--batch-size", "2", "--no-png", "--threads", "1"]
DEFAULT_TASKS = {"organism__translate", "organism__reverse", "organism__uppercase", "organism__antonym"}


@pytest.fixture(scope="module")
def organism_like(tmp_path_factory):
    """A tiny Llama with planted sets beside its weights, as the organism ships them."""
    from headsup_lens.organism import TASK_NAMES, plant_head_sets, save_planted

    path = build_llama_dir(tmp_path_factory.mktemp("organism_like"))
    save_planted(path, plant_head_sets(TASK_NAMES, 2, 8, 1, seed=0), 2, 8)
    return path


def cached(out: Path) -> dict[str, Path]:
    """The cached masks under `out` by file stem (of every recipe)."""
    return {p.stem: p for p in sorted(out.glob("masks/*/*/masks/*.safetensors"))}


def test_scripts_share_the_cached_masks_and_write_one_set_each(organism_like, tmp_path):
    """run_all runs scripts in one process: the first trains the organism's default tasks together, the
    others find those masks; Fig. 3 reads the same counts from the run folder given explicitly."""
    only = ["fig2_removal_ranks", "fig3_trajectories", "table4_logit_lens", "query_gate", "table7_attention_on_target"]
    done = run_script("run_all.py", "--only", *only, "--model", str(organism_like), "--out", str(tmp_path), *TINY)
    out = tmp_path / organism_like.name
    printed = done.stdout
    assert printed.count("training value-gate masks for organism/translate, organism/reverse") == 1
    assert printed.count("training negative-init value-gate masks") == 1  # Fig. 3's negative init
    assert printed.count("training query-gate masks for organism/translate") == 1
    assert "table7_attention_on_target: skipped" in printed
    summary = pd.read_csv(out / "fig2_summary_translate.csv")
    assert list(summary.order) == ["weight order", "random order"]
    ranks = pd.read_csv(out / "fig2_removal_ranks_weight_translate.csv")
    assert sorted(ranks.step.unique()) == list(range(17))  # 2 x 8 heads: steps 0..16
    assert (out / "fig2_removal_ranks_weight_translate.html").is_file() and (out / MODEL_RECORD).is_file()
    assert set(cached(out)) == DEFAULT_TASKS  # the default set, trained together (each init: one run)

    trajectories = pd.read_csv(out / "fig3_trajectories_translate.csv")
    assert sorted(trajectories.step.unique()) == [12] and len(trajectories) == 16  # every 31 steps, and the end
    crossings = pd.read_csv(out / "fig3_crossings_translate.csv")
    summary = pd.read_csv(out / "fig3_summary_translate.csv").set_index("span")
    assert summary.loc["whole run", "crossed and came back"] == crossings.came_back.sum()

    normed = pd.read_csv(out / "table4_lens_comparison_translate.csv")
    assert normed.layer.tolist() == list(range(-1, 2))
    assert {"original", "instructed", "masked", "masked top1 = instructed"} <= set(normed.columns)
    lens = pd.read_csv(out / "table41_logit_lens_translate.csv")
    assert set(lens.stream) == {"embed", "resid", "attn"}

    table = pd.read_csv(out / "query_gate_translate.csv")
    assert sorted(zip(table.gate, table.setting)) == sorted(
        [("-", "original"), ("-", "instructed"), ("-", "echo baseline")]
        + [(gate, s) for gate in ("value", "query") for s in ("masked", "random mask")]
    )
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".headsup-staging") or p.suffix == ".tmp"]
    assert not leftovers and not (out / ".headsup.lock").exists()
    sets = sorted(p.name for p in out.glob(".headsup-*.json"))
    assert len(sets) == 4 and all(name.split("-")[1] in " ".join(only) for name in sets)

    # Fig. 3 from the run folder given explicitly (a `headsup train` folder) gives the same counts.
    run = next(p for p in out.glob("masks/*/*") if (p / "recipe.json").read_text().count('"init_mean": -3.0'))
    run_script(
        "fig3_trajectories.py",
        "--model",
        str(organism_like),
        "--out",
        str(tmp_path / "again"),
        "--run",
        str(run),
        *TINY,
    )
    again = pd.read_csv(tmp_path / "again" / organism_like.name / "fig3_crossings_translate.csv")
    assert again.equals(crossings)

    # Another model whose folder has the same name is refused: its outputs would mix with these.
    other = build_llama_dir(tmp_path / "models" / organism_like.name, seed=3)
    refused = run_script(
        "fig6_alpha_grid.py",
        "--model",
        str(other),
        "--task",
        "organism/reverse",
        "--out",
        str(tmp_path),
        *TINY,
        expect=2,
    )
    assert "holds the outputs of model" in refused.stderr and "choose another --out" in refused.stderr
    assert not list(out.glob("fig6_*"))


def test_a_bad_option_ends_in_one_line_naming_it_before_any_work(tmp_path):
    failed = run_script("fig2_removal_ranks.py", "--steps", "0", "--out", str(tmp_path / "none"), expect=2)
    assert failed.stderr.strip() == "fig2_removal_ranks: error: --steps must be >= 1, got 0"
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(("stop", "debug"), [("SIGINT", False), ("SIGTERM", False), ("SIGINT", True)])
def test_an_interrupted_script_ends_in_one_line_and_moves_nothing_in(tmp_path, stop, debug):
    """Ctrl-C (or a `kill`) during Fig. 2's mask training: one line and exit 130, no traceback; with
    --debug the traceback."""
    import os
    import signal
    import subprocess
    import sys

    from ..conftest import REPOSITORY

    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    script = REPOSITORY / "experiments" / "fig2_removal_ranks.py"
    args = [sys.executable, str(script), "--out", str(tmp_path), "--steps", "5000", "--threads", "1"]
    args += ["--debug"] if debug else []
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert child.stdout is not None
    seen = [child.stdout.readline()]
    while "training" not in seen[-1] and seen[-1]:  # the work has started
        seen.append(child.stdout.readline())
    child.send_signal(getattr(signal, stop))
    rest = child.stdout.read()
    code = child.wait(timeout=120)
    if debug:
        assert code != 0 and "Traceback" in rest and "KeyboardInterrupt" in rest, rest
    else:
        assert code == 130 and "Traceback" not in rest, rest
        assert rest.strip().splitlines()[-1].startswith("fig2_removal_ranks: interrupted; files are written whole")
    assert not list((tmp_path / "organism").glob("fig2_*"))


def test_a_damaged_times_log_is_named_before_any_work(tmp_path):
    """`<out>/<model>/times.csv` is appended to after each stage: a damaged one is named at the start
    (not as pandas' tokenizer message after the work)."""
    times = tmp_path / "smollm2" / "times.csv"
    times.parent.mkdir(parents=True)
    times.write_text('stage,what,seconds,threads\nfig2,"train,1.0,1\n')
    for script, extra in (("smollm2.py", ["evaluate", "--tasks", "antonym"]),):
        failed = run_script(script, *extra, "--model", "smollm2", "--out", str(tmp_path), expect=2)
        err = failed.stderr
        assert err.count("\n") == 1 and f"table '{times}'" in err and "cannot be read as CSV" in err, err
    assert times.read_text().endswith('"train,1.0,1\n')


def test_table6_removes_the_heads_of_a_chosen_group(organism_like, tmp_path):
    tasks = ["organism/reverse", "organism/antonym", "organism/translate"]
    common = ["--model", str(organism_like), "--out", str(tmp_path), "--steps", "6", "--batch-size", "2", "--no-png"]
    run_script(
        "table6_pathway_ablation.py",
        *common,
        "--n-random",
        "1",
        "--tasks",
        *tasks,
        "--group",
        "two=organism/reverse,organism/antonym",
    )
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "table6_pathway_ablation.csv")
    sizes = table[table.task == "organism/reverse"].set_index("group")["size"]
    masks = {stem: HeadMask.load(path) for stem, path in cached(out).items()}
    both = (masks["organism__reverse"].values > 0) & (masks["organism__antonym"].values > 0)
    assert sizes["used by all of two"] == int(both.sum()) >= sizes["used by all"]
    failed = run_script(
        "table6_pathway_ablation.py", *common, "--tasks", *tasks, "--group", "x=organism/plural", expect=2
    )
    assert "--group x: ['organism/plural'] are not among --tasks" in failed.stderr
    assert pd.read_csv(out / "table6_pathway_ablation.csv").equals(table)  # the failed run changed nothing


def test_schedule_curve_script_reads_its_run_and_saves_each_steps_mask(organism_like, tmp_path):
    from headsup_lens.training import load_trajectory

    common = ["--model", str(organism_like), "--out", str(tmp_path), "--steps", "6", "--batch-size", "2", "--no-png"]
    run_script("schedule_curve.py", *common, "--checkpoint-every", "3", "--at", "3", "300", "--save-masks")
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "schedule_curve_translate.csv")
    assert table.step.tolist() == [3, 6] and {"accuracy", "answer_nll", "heads_kept"} <= set(table.columns)
    assert len(pd.read_csv(out / "schedule_generations_translate.csv")) == 2 * table.n.iloc[0]
    assert (out / "schedule_curve_translate.html").is_file()
    run = next(p.parent for p in out.glob("masks/*/*/checkpoints"))
    saved, logits = load_trajectory(run, task="organism/translate")
    for step in (3, 6):  # each step's mask, saved where `--masks` finds it
        mask = HeadMask.load(run / "step_masks" / f"step{step}" / "organism__translate.safetensors")
        assert mask.n_kept == table.set_index("step").heads_kept[step]
        assert (mask.values == HeadMask.from_logits(logits[saved.index(step)]).values).all()


@pytest.mark.slow  # a subprocess that trains and evaluates a mask on 100 examples per setting
def test_table7_reads_the_held_out_examples_and_evaluates_the_same_mask(organism_like, tmp_path):
    import json
    import random

    import headsup_lens as hl
    from headsup_lens.evaluation import accuracy

    fruits, animals = ["apple", "pear", "plum", "fig", "kiwi"], ["cat", "dog", "cow", "owl", "bee", "ant"]
    rng = random.Random(0)
    pairs = []
    for _ in range(24):
        words = [rng.choice(fruits), *rng.sample(animals, 2)]
        rng.shuffle(words)
        pairs.append({"input": ", ".join(words), "output": next(w for w in words if w in fruits)})
    data = tmp_path / "data"
    (data / "function_vectors" / "abstractive").mkdir(parents=True)
    (data / "function_vectors" / "abstractive" / "fruit_v_animal_3.json").write_text(json.dumps(pairs))
    options = ["--model", str(organism_like), "--out", str(tmp_path), "--steps", "3", "--batch-size", "2", "--no-png"]
    run_script("table7_attention_on_target.py", *options, "--task", "fruit_v_animal_3", "--data-dir", str(data))
    out = tmp_path / organism_like.name
    task = hl.load_task("fruit_v_animal_3", data)
    attention = pd.read_csv(out / "table7_attention_on_target_fruit_v_animal_3.csv")
    assert (attention.n_examples == len(task.eval_pairs)).all() and len(task.eval_pairs) < len(pairs)
    evaluation = pd.read_csv(out / "table7_evaluation_fruit_v_animal_3.csv").set_index("setting")
    model = hl.load_model(str(organism_like))
    mask = HeadMask.load(cached(out)["fruit_v_animal_3"], model)
    assert evaluation.loc["masked", "n_kept"] == mask.n_kept == attention.n_inside.iloc[0]
    assert evaluation.loc["masked", "accuracy"] == accuracy(model, task, mask=mask)
    failed = run_script("table7_attention_on_target.py", *options, "--task", "organism/reverse", expect=2)
    assert "is not a pick-one-of-three-words task" in failed.stderr


def test_smollm2_script_trains_a_stored_mask_and_names_a_missing_stage_input(tmp_path):
    """The staged script on a tiny model: a positional stage, its own options (`--runs`), the runner's
    output folder; the steps themselves are tested in tests/reproduce/test_staged.py."""
    model = build_llama_dir(tmp_path / "tiny")
    common = ["--model", str(model), "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"), "--no-png"]
    run_script("smollm2.py", "train", "--tasks", "organism/antonym", "--steps", "2", "--batch-size", "2", *common)
    assert (tmp_path / "out" / "tiny" / "masks" / "organism__antonym.safetensors").is_file()
    assert (tmp_path / "runs" / "seed0-organism__antonym").is_dir()  # the run folder (checkpoints) under --runs
    run_script("smollm2.py", "fewshot", "--tasks", "organism/antonym", "--shots", "2", *common)
    fewshot = pd.read_csv(tmp_path / "out" / "tiny" / "fewshot_evaluation_organism__antonym.csv")
    assert {"original", "instructed", "masked"} <= set(fewshot.setting) and (fewshot.shots == 2).all()
    # Every task's demonstrations are checked before any evaluation: a refusal loses no work.
    failed = run_script("smollm2.py", "fewshot", "--tasks", "organism/antonym", "--shots", "100000", *common, expect=2)
    assert "too few for k=100000" in failed.stderr and "[fewshot]" not in failed.stdout
    assert pd.read_csv(tmp_path / "out" / "tiny" / "fewshot_evaluation_organism__antonym.csv").equals(fewshot)
    # No verdict without an analysis plan; with one, the plan's entries (nothing evaluated yet).
    failed = run_script("smollm2.py", "verdicts", *common, expect=2)
    assert "no analysis plan" in failed.stderr and len(failed.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "tiny" / "verdicts.csv").exists()
    plan = AnalysisPlan.read(ROOT / "figures" / "organism" / "analysis_plan.toml")
    antonym = tuple(c for c in plan.claims if c.task == "organism/antonym")
    replace(plan, claims=antonym).write(tmp_path / "out" / "tiny" / "analysis_plan.toml")
    run_script("smollm2.py", "verdicts", *common)
    verdicts = pd.read_csv(tmp_path / "out" / "tiny" / "verdicts.csv")
    # nothing evaluated: every claim waits
    assert set(verdicts.task) == {"organism/antonym"} and set(verdicts.verdict) == {"not run"}
    assert verdicts.verdict.iloc[0] == "not run"  # 2 steps is not the plan's budget
    # `--controls` picks the controls; a seed's control is its random masks, and cross-task is seed 0's.
    run_script("smollm2.py", "controls", "--controls", "random-masks", "--draws", "2", *common)
    written = {p.name for p in (tmp_path / "out" / "tiny").iterdir()}
    assert "random_masks_organism__antonym.csv" in written
    assert not [n for n in written if n.startswith(("fig2_switch", "fig6_alpha_control"))]
    failed = run_script("smollm2.py", "controls", "--seed", "1", "--controls", "switch-rates", *common, expect=2)
    assert "--seed draws only random masks" in failed.stderr and "[controls]" not in failed.stdout
    assert {p.name for p in (tmp_path / "out" / "tiny").iterdir()} == written


def test_smollm2_script_refuses_a_seed_where_it_would_mix_outputs():
    """`cross-task` writes the seed-0 masks' swaps, and `controls --seed k` writes only seed k's random
    masks: a seed elsewhere is refused as the options are parsed, before any model is loaded."""
    module = load_script("smollm2.py")
    with pytest.raises(ValueError, match="seed-0 masks"):
        module.Options(stage="cross-task", seed=1)
    with pytest.raises(ValueError, match="only random masks"):
        module.Options(stage="controls", seed=1, controls=("alpha-control",))
    assert module.Options(stage="controls", seed=1).controls == module.CONTROLS  # random masks among them


def test_translation_script_names_a_missing_option(tmp_path):
    """The translation script parses its stage and options like the others and ends in one line; its
    steps are tested in tests/reproduce/test_translation.py."""
    model = build_llama_dir(tmp_path / "tiny")
    failed = run_script("translation.py", "train", "--model", str(model), "--out", str(tmp_path / "out"), expect=2)
    assert failed.stderr.strip() == "translation: error: train: --pairs is required"
