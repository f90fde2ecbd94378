"""experiments/sft_patterns.py select: pattern-guided data selection end to end on a tiny random model."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from headsup_lens.data import load_task
from headsup_lens.evaluation import answer_loss
from headsup_lens.models import load_model
from headsup_lens.sft import pattern_subset

from ..conftest import build_llama_dir

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
CANDIDATES = ["plural", "uppercase", "reverse", "capitalize"]


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import sft_patterns

        yield sft_patterns
    finally:
        sys.path.remove(str(EXPERIMENTS))


def test_select_stage_runs_ranks_and_resumes(script, tmp_path, capsys):
    base = build_llama_dir(tmp_path / "base")  # stands in for the base organism (it is not retrained)
    out, runs = tmp_path / "figures", tmp_path / "runs"
    argv = [
        "select",
        "--model",
        "organism",
        "--base",
        str(base),
        "--out",
        str(out),
        "--runs",
        str(runs),
        "--targets",
        "plural+uppercase",
        "reverse",
        "--candidates",
        *CANDIDATES,
        "--k",
        "2",
        "--seeds",
        "1",
        "--draws",
        "2",
        "--steps",
        "2",
        "--probe-steps",
        "2",
        "--eval-examples",
        "4",
        "--pattern-examples",
        "4",
        "--train-pairs",
        "8",
        "--no-png",
    ]
    script.main(argv)
    ranking = pd.read_csv(out / "sft_data_selection_ranking.csv")
    runs_table = pd.read_csv(out / "sft_data_selection_runs.csv")
    # The target is never its own candidate; the composite's components are.
    assert len(ranking[ranking.target == "organism/reverse"]) == 3
    assert "organism/reverse" not in set(ranking[ranking.target == "organism/reverse"].candidate)
    assert len(ranking[ranking.target == "organism/plural+uppercase"]) == 4
    counts = runs_table.groupby(["target", "condition"]).size().to_dict()
    assert counts == {
        ("organism/plural+uppercase", c): n
        for c, n in (("none", 1), ("selected", 1), ("random", 2), ("oracle", 1), ("target", 1))
    } | {("organism/reverse", c): n for c, n in (("none", 1), ("selected", 1), ("random", 2), ("target", 1))}
    for target, part in ranking.groupby("target"):
        top = " ".join(part.sort_values("rank").candidate[:2])
        assert set(runs_table[(runs_table.target == target) & (runs_table.condition == "selected")].sources) == {top}
        # Each run's mean similarity is that of its sources in the ranking.
        similarity = part.set_index("candidate").similarity
        for _, row in runs_table[(runs_table.target == target) & (runs_table.condition == "random")].iterrows():
            assert row.similarity_mean == pytest.approx(similarity[row.sources.split()].mean())
    assert set(runs_table[runs_table.condition == "oracle"].sources) == {"organism/plural organism/uppercase"}
    assert (runs_table.n_eval == 4).all() and runs_table.answer_loss.gt(0).all()
    # "none" is the base model itself, also after the runs before it changed and restored its weights.
    none = runs_table[runs_table.condition == "none"].set_index("target").answer_loss
    fresh = load_model(str(base), dtype="float32")
    assert none["organism/reverse"] == pytest.approx(
        answer_loss(fresh, pattern_subset(load_task("organism/reverse"), 4), instructed=True), rel=1e-6
    )
    assert runs_table[runs_table.condition != "none"].answer_loss.ne(none["organism/reverse"]).all()
    summary = pd.read_csv(out / "sft_data_selection.csv")
    row = summary[(summary.target == "organism/reverse") & (summary.condition == "random")].iloc[0]
    values = runs_table[(runs_table.target == "organism/reverse") & (runs_table.condition == "random")].answer_loss
    assert row.n == 2 and row.seeds == "0 1"
    assert row.answer_loss_mean == pytest.approx(values.mean()) and row.answer_loss_sd == pytest.approx(values.std())
    paired = summary.set_index("condition").loc["selected - random"]
    per_target = summary[~summary.target.str.startswith("mean of")]  # not the rows averaging over targets
    mean = lambda c: per_target[per_target.condition == c].set_index("target").answer_loss_mean  # noqa: E731
    gap = (mean("selected") - mean("random")).dropna()
    assert paired.n == 2 and paired.answer_loss_mean == pytest.approx(gap.mean())
    decided = gap[gap.abs() > 1e-6]  # a random draw can pick the selected sources: a tie
    ties = f" ({len(gap) - len(decided)} tied)" if len(decided) < len(gap) else ""
    assert paired.sources == f"selected has the lower loss on {int((decided < 0).sum())} of 2 targets{ties}"
    assert (0 < paired.p_sign <= 1 or not len(decided)) and "oracle - random" in set(summary.condition)
    rho = pd.read_csv(out / "sft_data_selection_similarity.csv").set_index("target")
    assert rho.loc["organism/plural+uppercase", "n_runs"] == 4  # selected, two random draws, oracle
    assert rho.rho.dropna().between(-1, 1).all()
    generations = pd.read_csv(out / "sft_data_selection_generations.csv")
    assert len(generations) == 4 * len(runs_table)
    assert (out / "sft_data_selection.html").is_file()
    capsys.readouterr()

    # A rerun finds every run done: nothing is trained or evaluated again.
    script.main(argv)
    assert "accuracy" not in capsys.readouterr().out
    assert pd.read_csv(out / "sft_data_selection_runs.csv").equals(runs_table)
    with pytest.raises(SystemExit, match="other settings"):
        script.main([a if a != "--steps" else "--steps" for a in argv[:-1]] + ["--no-png", "--k", "1"])


def test_smollm2_variant_takes_the_same_path_with_lora(script, tmp_path, monkeypatch, shared_data_dir, capsys):
    """`--model smollm2` on a tiny stand-in: function-vector tasks, LoRA runs, a fresh model per run."""
    tiny = build_llama_dir(tmp_path / "tiny")
    loads = []

    def fake_load(name, dtype=None):
        loads.append(name)
        return load_model(str(tiny), dtype="float32")

    monkeypatch.setenv("HEADSUP_DATA_DIR", str(shared_data_dir))
    monkeypatch.setattr(script.hl, "load_model", fake_load)
    out = tmp_path / "figures"
    script.main(
        [
            "select",
            "--model",
            "smollm2",
            "--out",
            str(out),
            "--runs",
            str(tmp_path / "runs"),
            "--targets",
            "antonym",
            "--candidates",
            "synonym",
            "present-past",
            "capitalize",
            "--k",
            "1",
            "--seeds",
            "1",
            "--draws",
            "1",
            "--steps",
            "2",
            "--probe-steps",
            "2",
            "--eval-examples",
            "3",
            "--pattern-examples",
            "3",
            "--train-pairs",
            "8",
            "--no-png",
        ]
    )
    assert set(loads) == {"smollm2"} and len(loads) == 4 + 4  # 4 probes, 4 runs (none, selected, random, target)
    table = pd.read_csv(out / "sft_data_selection_runs.csv")
    assert list(table.condition) == ["none", "selected", "random", "target"] and (table.n_eval == 3).all()
    assert table.sources[1] == pd.read_csv(out / "sft_data_selection_ranking.csv").candidate[0]
    settings = (tmp_path / "runs" / "smollm2_sft_selection" / "settings.json").read_text()
    assert '"method": "lora"' in settings and '"train_pairs": 8' in settings


def test_smollm2_stage_on_a_tiny_stand_in(script, tmp_path, monkeypatch, shared_data_dir):
    """The `smollm2` stage (LoRA SFT on function-vector tasks, bare inputs) on a tiny stand-in: Table 1,
    the grouping test of Fig. 2 read back against `grouping_test`, the final scores against their
    generations, and the overlap with a stored mask."""
    from headsup_lens.analysis import grouping_test
    from headsup_lens.masks import HeadMask

    tiny = build_llama_dir(tmp_path / "tiny")
    monkeypatch.setenv("HEADSUP_DATA_DIR", str(shared_data_dir))
    monkeypatch.setattr(script.hl, "load_model", lambda name, dtype=None: load_model(str(tiny), dtype="float32"))
    out, masks = tmp_path / "figures", tmp_path / "masks"
    masks.mkdir()
    model = load_model(str(tiny), dtype="float32")
    HeadMask.from_heads([(0, 0), (1, 1)], model).save(masks / "antonym.safetensors")
    script.main(
        [
            "smollm2",
            "--tasks",
            "antonym",
            "synonym",
            "capitalize",
            "--steps",
            "5",
            "--out",
            str(out),
            "--runs",
            str(tmp_path / "runs"),
            "--masks",
            str(masks),
            "--no-png",
        ]
    )

    table1 = pd.read_csv(out / "sft_table1.csv")
    assert list(table1.task) == ["antonym", "synonym", "capitalize", "mean"] and (table1.n_examples == 16).all()
    corr = pd.read_csv(out / "sft_fig2_change_correlation.csv", index_col=0)
    grouped = pd.read_csv(out / "sft_fig2_grouping.csv").iloc[0]
    assert grouped.groups == "antonym+synonym | capitalize"
    expected = grouping_test(corr, [["antonym", "synonym"], ["capitalize"]])
    assert grouped.p_value == pytest.approx(expected.p_value) and grouped.within == pytest.approx(expected.within)
    assert grouped.n_assignments == 6  # 3! label orders

    scores = pd.read_csv(out / "sft_final_scores.csv").set_index("task")
    shown = pd.read_csv(out / "sft_generations.csv")
    for name, rows in shown.groupby("task"):
        assert scores.loc[name, "n"] == len(rows) == 16
        assert scores.loc[name, "accuracy"] == pytest.approx(rows.correct.mean())
        assert scores.loc[name, "echo"] == rows.echo.sum()
    overlap = pd.read_csv(out / "sft_mask_overlap.csv")
    assert set(overlap.task) == {"antonym"} and (overlap.k == 2).all()
    assert list(pd.read_csv(out / "sft_accuracy.csv").step.unique()) == [0, 5]
