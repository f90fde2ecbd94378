"""Reproduction scripts run end to end on a tiny random model with tiny settings and write their outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from ..conftest import build_llama_dir

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


@pytest.fixture(scope="module")
def scripts():
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import fig2_removal_ranks
        import fig3_trajectories
        import run_all

        yield {"fig2": fig2_removal_ranks, "fig3": fig3_trajectories, "run_all": run_all}
    finally:
        sys.path.remove(str(EXPERIMENTS))


@pytest.fixture(scope="module")
def organism_like(tmp_path_factory):
    """A tiny Llama with planted sets beside its weights, as the organism ships them."""
    from headsup_lens.organism import TASK_NAMES, plant_head_sets, save_planted

    path = build_llama_dir(tmp_path_factory.mktemp("organism_like"))
    save_planted(path, plant_head_sets(TASK_NAMES, 2, 8, 1, seed=0), 2, 8)
    return path


def test_fig2_then_fig3_reuse_the_cached_mask(scripts, organism_like, tmp_path, capsys):
    common = [
        "--model",
        str(organism_like),
        "--out",
        str(tmp_path),
        "--steps",
        "12",
        "--batch-size",
        "2",
        "--no-png",
        "--threads",
        "1",
        "--max-new-tokens",
        "3",
    ]
    scripts["fig2"].main(common)
    out = tmp_path / organism_like.name
    summary = pd.read_csv(out / "fig2_summary_translate.csv")
    assert list(summary.order) == ["weight order", "random order"]
    ranks = pd.read_csv(out / "fig2_removal_ranks_weight_translate.csv")
    assert sorted(ranks.step.unique()) == list(range(17))  # 2 x 8 heads: steps 0..16
    assert (out / "fig2_removal_ranks_weight_translate.html").is_file()
    masks = sorted(out.glob("masks/*/*/masks/*.safetensors"))
    # the organism's default task set is trained together, so other scripts find their masks
    assert {m.stem for m in masks} == {
        "organism__translate",
        "organism__reverse",
        "organism__uppercase",
        "organism__antonym",
    }
    assert "training" in capsys.readouterr().out

    scripts["fig3"].main(
        [a for a in common if a not in ("--max-new-tokens", "3")] + ["--init", "default", "--until", "1"]
    )
    assert "training" not in capsys.readouterr().out  # reused, not retrained
    trajectories = pd.read_csv(out / "fig3_trajectories_translate.csv")
    assert sorted(trajectories.step.unique()) == [12]  # checkpoints every 31 steps (the reference's) and at the end
    assert len(trajectories) == 16
    stamps = {m: m.stat().st_mtime_ns for m in masks}
    assert stamps == {m: m.stat().st_mtime_ns for m in sorted(out.glob("masks/*/*/masks/*.safetensors"))}


def test_fig3_trains_a_negative_init_run_and_counts_crossings(scripts, organism_like, tmp_path, capsys):
    common = [
        "--model",
        str(organism_like),
        "--out",
        str(tmp_path),
        "--steps",
        "12",
        "--batch-size",
        "2",
        "--no-png",
        "--threads",
        "1",
        "--checkpoint-every",
        "2",
        "--task",
        "organism/reverse",
    ]
    scripts["fig3"].main(common)
    assert "negative-init" in capsys.readouterr().out
    out = tmp_path / organism_like.name
    trajectories = pd.read_csv(out / "fig3_trajectories_reverse.csv")
    assert sorted(trajectories.step.unique()) == [2, 4, 6, 8, 10, 12]
    summary = pd.read_csv(out / "fig3_summary_reverse.csv").set_index("span")
    assert summary.loc["plotted", "last step"] == 6 and summary.loc["whole run", "checkpoints"] == 6
    crossings = pd.read_csv(out / "fig3_crossings_reverse.csv")
    assert len(crossings) == 16 and summary.loc["whole run", "crossed and came back"] == crossings.came_back.sum()
    first = trajectories[trajectories.step == 2].weight
    assert (first < 0.5).mean() > 0.5  # negative init: most heads start outside the pathway
    # The same counts from the run folder given explicitly.
    run = next(out.glob("masks/*/*/checkpoints")).parent
    scripts["fig3"].main([*common, "--run", str(run), "--out", str(tmp_path / "again")])
    again = pd.read_csv(tmp_path / "again" / organism_like.name / "fig3_crossings_reverse.csv")
    assert again.equals(crossings)


def test_run_all_skips_table7_without_a_three_word_task(scripts, organism_like, tmp_path, capsys):
    scripts["run_all"].main(
        ["--only", "table7_attention_on_target", "--model", str(organism_like), "--out", str(tmp_path)]
    )
    assert "skipped" in capsys.readouterr().out
    assert not (tmp_path / organism_like.name).exists()


def test_bench_performance_runs_and_checks_its_loops(organism_like, tmp_path, monkeypatch, capsys):
    """The benchmark on a tiny model: the sweep equals the sequential loop, evaluation equals per-example
    generation, and every loop (and its plain-transformers reference) reports positive FLOP/s. A training
    step's time is the difference of a 40- and a 20-step run: enough steps to stand above timer noise."""
    import json

    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import bench_performance
    finally:
        sys.path.remove(str(EXPERIMENTS))
    out = tmp_path / "bench.json"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench_performance.py",
            "--model",
            str(organism_like),
            "--threads",
            "1",
            "--repeats",
            "1",
            "--sweep-steps",
            "4",
            "--new-tokens",
            "3",
            "--sequential-steps",
            "2",
            "--skip-former",
            "--eval-prompts",
            "3",
            "--eval-new-tokens",
            "2",
            "--train-steps",
            "40",
            "--json",
            str(out),
        ],
    )
    assert bench_performance.main() == 0
    results = json.loads(out.read_text())["results"]["fp32"]
    assert results["sweep"]["identical_to_sequential"] is True
    assert results["eval"]["identical"] is True
    for section in ("sweep", "train"):
        assert results[section]["fraction_wall"][0] > 0
        assert results[section]["plain"]["fraction_wall"][0] > 0
    assert "plain transformers, same work" in capsys.readouterr().out


def test_table6_removes_the_heads_of_a_chosen_group(organism_like, tmp_path):
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import table6_pathway_ablation
    finally:
        sys.path.remove(str(EXPERIMENTS))
    from headsup_lens.masks import HeadMask

    tasks = ["organism/reverse", "organism/antonym", "organism/translate"]
    table6_pathway_ablation.main(
        [
            "--model",
            str(organism_like),
            "--out",
            str(tmp_path),
            "--steps",
            "6",
            "--batch-size",
            "2",
            "--no-png",
            "--threads",
            "1",
            "--n-random",
            "1",
            "--tasks",
            *tasks,
            "--group",
            "two=organism/reverse,organism/antonym",
        ]
    )
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "table6_pathway_ablation.csv")
    sizes = table[table.task == "organism/reverse"].set_index("group")["size"]
    masks = {p.stem: HeadMask.load(p) for p in out.glob("masks/*/*/masks/*.safetensors")}
    both = (masks["organism__reverse"].values > 0) & (masks["organism__antonym"].values > 0)
    assert sizes["used by all of two"] == int(both.sum()) >= sizes["used by all"]
    with pytest.raises(SystemExit, match="not among"):
        table6_pathway_ablation.main(
            [
                "--model",
                str(organism_like),
                "--out",
                str(tmp_path),
                "--steps",
                "6",
                "--batch-size",
                "2",
                "--no-png",
                "--tasks",
                *tasks,
                "--group",
                "x=organism/plural",
            ]
        )


def test_table4_compares_the_three_settings(organism_like, tmp_path):
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import table4_logit_lens
    finally:
        sys.path.remove(str(EXPERIMENTS))
    common = [
        "--model",
        str(organism_like),
        "--out",
        str(tmp_path),
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--no-png",
        "--threads",
        "1",
        "--k",
        "3",
    ]
    table4_logit_lens.main(common)
    table4_logit_lens.main([*common, "--no-final-norm"])
    out = tmp_path / organism_like.name
    normed = pd.read_csv(out / "table4_lens_comparison_translate.csv")
    raw = pd.read_csv(out / "table4_lens_comparison_no_norm_translate.csv")
    assert normed.layer.tolist() == raw.layer.tolist() == list(range(-1, 2))
    assert {"original", "instructed", "masked", "masked top1 = instructed"} <= set(normed.columns)
    assert normed.masked.iloc[-1] == raw.masked.iloc[-1]  # the last row is the model's own prediction either way
    lens = pd.read_csv(out / "table41_logit_lens_translate.csv")
    assert set(lens.stream) == {"embed", "resid", "attn"}


def test_schedule_curve_script_reads_its_run(organism_like, tmp_path):
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import schedule_curve
    finally:
        sys.path.remove(str(EXPERIMENTS))
    schedule_curve.main(
        [
            "--model",
            str(organism_like),
            "--out",
            str(tmp_path),
            "--steps",
            "6",
            "--batch-size",
            "2",
            "--no-png",
            "--threads",
            "1",
            "--checkpoint-every",
            "3",
            "--at",
            "3",
            "300",
            "--save-masks",
        ]
    )
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "schedule_curve_translate.csv")
    assert table.step.tolist() == [3, 6] and {"accuracy", "answer_nll", "heads_kept"} <= set(table.columns)
    generations = pd.read_csv(out / "schedule_generations_translate.csv")
    assert len(generations) == 2 * table.n.iloc[0]
    from headsup_lens.masks import HeadMask
    from headsup_lens.training import load_trajectory

    run = next(p.parent for p in out.glob("masks/*/*/checkpoints"))
    saved, logits = load_trajectory(run, task="organism/translate")
    for step in (3, 6):  # each step's mask, saved where `--masks` finds it
        mask = HeadMask.load(run / "step_masks" / f"step{step}" / "organism__translate.safetensors")
        assert mask.n_kept == table.set_index("step").heads_kept[step]
        assert (mask.values == HeadMask.from_logits(logits[saved.index(step)]).values).all()


def test_query_gate_evaluates_each_gate_with_its_own_mask_and_controls(organism_like, tmp_path):
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import query_gate
    finally:
        sys.path.remove(str(EXPERIMENTS))
    import json

    import headsup_lens as hl
    from headsup_lens.evaluation import accuracy, answer_loss
    from headsup_lens.masks import HeadMask

    query_gate.main(
        [
            "--model",
            str(organism_like),
            "--out",
            str(tmp_path),
            "--steps",
            "4",
            "--batch-size",
            "2",
            "--no-png",
            "--threads",
            "1",
            "--task",
            "organism/uppercase",
        ]
    )
    out = tmp_path / organism_like.name
    table = pd.read_csv(out / "query_gate_uppercase.csv")
    assert sorted(zip(table.gate, table.setting)) == sorted(
        [
            ("-", "original"),
            ("-", "instructed"),
            ("-", "echo baseline"),
            ("value", "masked"),
            ("value", "random mask"),
            ("query", "masked"),
            ("query", "random mask"),
        ]
    )
    assert {"strict", "echo", "accuracy_low", "p_vs_instructed"} <= set(table.columns)
    query_row = table[(table.gate == "query") & (table.setting == "masked")].iloc[0]
    assert 0 <= query_row.p_vs_original <= 1  # paired with the original row of the same call
    runs = [p for p in out.glob("masks/*/*") if json.loads((p / "recipe.json").read_text())["gate"] == "query"]
    model = hl.load_model(str(organism_like))
    task = hl.load_task("organism/uppercase")
    mask = HeadMask.load(runs[0] / "masks" / "organism__uppercase.safetensors", model)
    assert query_row.n_kept == mask.n_kept
    assert query_row.answer_nll == pytest.approx(answer_loss(model, task, mask=mask, gate="query"), rel=1e-5)
    assert query_row.accuracy == accuracy(model, task, mask=mask, gate="query")
    generations = pd.read_csv(out / "query_gate_generations_uppercase.csv")
    assert len(generations[(generations.gate == "query") & (generations.setting == "masked")]) == len(task.eval_pairs)


def test_table7_reads_the_held_out_examples_and_evaluates_the_same_mask(organism_like, tmp_path):
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import table7_attention_on_target
    finally:
        sys.path.remove(str(EXPERIMENTS))
    import json
    import random

    import headsup_lens as hl
    from headsup_lens.evaluation import accuracy
    from headsup_lens.masks import HeadMask

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
    table7_attention_on_target.main(
        [
            "--model",
            str(organism_like),
            "--out",
            str(tmp_path),
            "--steps",
            "3",
            "--batch-size",
            "2",
            "--no-png",
            "--threads",
            "1",
            "--task",
            "fruit_v_animal_3",
            "--data-dir",
            str(data),
        ]
    )
    out = tmp_path / organism_like.name
    task = hl.load_task("fruit_v_animal_3", data)
    attention = pd.read_csv(out / "table7_attention_on_target_fruit_v_animal_3.csv")
    assert (attention.n_examples == len(task.eval_pairs)).all() and len(task.eval_pairs) < len(pairs)
    evaluation = pd.read_csv(out / "table7_evaluation_fruit_v_animal_3.csv").set_index("setting")
    model = hl.load_model(str(organism_like))
    mask = HeadMask.load(next(out.glob("masks/*/*/masks/fruit_v_animal_3.safetensors")), model)
    assert evaluation.loc["masked", "n_kept"] == mask.n_kept == attention.n_inside.iloc[0]
    assert evaluation.loc["masked", "accuracy"] == accuracy(model, task, mask=mask)
    assert {"balanced_accuracy", "strict", "echo"} <= set(evaluation.columns)
