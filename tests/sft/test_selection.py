"""Pattern-guided data selection: the plan, the statistics on hand-made tables, and a whole study on a
tiny random model (runs, resumes, refuses another study's folder)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch

from headsup_lens.data import load_task
from headsup_lens.evaluation import answer_loss
from headsup_lens.models import load_model
from headsup_lens.reproduce._sft import organism_selection, smollm2_selection
from headsup_lens.sft import (
    FinetuneConfig,
    SelectionConfig,
    SelectionRun,
    composite_components,
    data_selection,
    pattern_subset,
    random_sources,
    reloading,
    selection_plan,
    selection_summary,
    similarity_vs_loss,
)


def small(**overrides) -> SelectionConfig:
    settings = dict(steps=2, probe_steps=2, eval_examples=4, pattern_examples=4, train_pairs=16, seeds=1, draws=2)
    return organism_selection(**{**settings, **overrides})


def test_the_presets_are_the_studies_of_the_script():
    organism = organism_selection()
    assert (organism.steps, organism.probe_steps, organism.eval_examples, organism.pattern_examples) == (
        40,
        30,
        100,
        32,
    )
    assert organism.train_pairs is None and len(organism.targets) == 12 and organism.k == 2
    assert organism.probe_config() == FinetuneConfig(
        batch_size=16, lr=1e-3, steps=30, pattern_steps=(0,), pattern_examples=32, accuracy=False, progress=False
    )
    assert organism.run_config(1) == FinetuneConfig(
        batch_size=16, lr=1e-3, steps=40, seed=1, pattern_examples=1, accuracy=False, progress=False
    )
    smollm2 = smollm2_selection(seed=3)
    assert smollm2.run_config(0).method == "lora" and smollm2.run_config(0).batch_size == 8
    assert smollm2.probe_config().seed == 3 and smollm2.train_pairs == 200
    settings = smollm2.settings(["synonym"])
    assert settings["model"] == "smollm2" and settings["probe"]["method"] == "lora" and settings["seed"] == 3


def test_random_sources_and_composites():
    candidates = ["a", "b", "c", "d", "e"]
    first = random_sources(candidates, 2, 0, "t", 0)
    assert first == random_sources(candidates, 2, 0, "t", 0) and len(set(first)) == 2
    assert first == sorted(first, key=candidates.index)  # in the candidates' order
    draws = {tuple(random_sources(candidates, 2, 0, "t", d)) for d in range(20)}
    assert len(draws) > 3  # the draws differ
    assert composite_components("organism/plural+uppercase") == ["organism/plural", "organism/uppercase"]
    assert composite_components("antonym") == ["antonym"] and composite_components("x+y") == ["x", "y"]


def test_the_plan_ranks_by_correlation_and_lists_the_runs():
    base = torch.arange(8.0).reshape(2, 4)
    noise = torch.tensor([[1.0, -1.0, 0.5, 0.0], [0.0, 2.0, -2.0, 1.0]])
    changes = {
        "o/a+b": base,
        "o/a": base + 0.1 * noise,  # nearly the target's change
        "o/b": base + 2.0 * noise,  # less so
        "o/c": -base,  # the opposite
        "o/d": noise,
    }
    config = small(k=2, seeds=2, draws=3)
    ranking, runs = selection_plan(changes, ["o/a+b", "o/c"], ["o/a", "o/b", "o/c", "o/d"], config)
    target = ranking[ranking.target == "o/a+b"]
    assert target.candidate.tolist()[:2] == ["o/a", "o/b"] and target["rank"].tolist() == [1, 2, 3, 4]
    expected = np.corrcoef(base.flatten(), changes["o/b"].flatten())[0, 1]
    assert target.set_index("candidate").similarity["o/b"] == pytest.approx(expected)
    assert "o/c" not in set(ranking[ranking.target == "o/c"].candidate)  # never its own candidate
    mine = [r for r in runs if r.target == "o/a+b"]
    conditions = [r.condition for r in mine]
    assert conditions == ["none", *["selected"] * 2, *["random"] * 3, *["oracle"] * 2, "target"]
    assert mine[1] == SelectionRun("o/a+b", "selected", 0, ("o/a", "o/b"))
    assert mine[-3].sources == ("o/a", "o/b") and mine[-1].sources == ("o/a+b",)
    assert not [r for r in runs if r.target == "o/c" and r.condition == "oracle"]  # not a composite
    with pytest.raises(ValueError, match="k must lie in"):
        selection_plan(changes, ["o/c"], ["o/a", "o/b"], small(k=2))


def runs_table() -> pd.DataFrame:
    """Two targets; random has two draws on t1. selected beats random on t1, loses on t2."""
    rows = [
        ("t1", "none", 0, "", np.nan, 0.0, 3.0),
        ("t1", "selected", 0, "a b", 0.9, 0.5, 1.0),
        ("t1", "random", 0, "a c", 0.5, 0.2, 2.0),
        ("t1", "random", 1, "b c", 0.3, 0.4, 1.6),
        ("t2", "none", 0, "", np.nan, 0.1, 2.5),
        ("t2", "selected", 0, "c d", 0.8, 0.3, 2.2),
        ("t2", "random", 0, "a d", 0.2, 0.6, 1.2),
    ]
    columns = ["target", "condition", "seed", "sources", "similarity_mean", "accuracy", "answer_loss"]
    return pd.DataFrame(rows, columns=columns)


def test_the_summary_by_hand():
    summary = selection_summary(runs_table())
    random = summary[(summary.target == "t1") & (summary.condition == "random")].iloc[0]
    assert random.n == 2 and random.seeds == "0 1" and random.sources == "a c | b c"
    assert random.answer_loss_mean == pytest.approx(1.8) and random.answer_loss_sd == pytest.approx(
        np.std([2, 1.6], ddof=1)
    )
    assert (random.answer_loss_min, random.answer_loss_max) == (1.6, 2.0)
    single = summary[(summary.target == "t1") & (summary.condition == "selected")].iloc[0]
    assert np.isnan(single.answer_loss_sd)
    means = summary.set_index("target")
    assert means.loc["mean of 2 targets"].query("condition == 'selected'").answer_loss_mean.item() == pytest.approx(1.6)
    paired = summary.set_index("condition").loc["selected - random"]
    # Per-target gaps: t1 1.0 - 1.8 = -0.8, t2 2.2 - 1.2 = +1.0.
    assert paired.answer_loss_mean == pytest.approx(0.1) and paired.answer_loss_min == pytest.approx(-0.8)
    assert paired.sources == "selected has the lower loss on 1 of 2 targets" and paired.p_sign == pytest.approx(1.0)
    assert paired.accuracy_mean == pytest.approx(((0.5 - 0.3) + (0.3 - 0.6)) / 2)
    assert paired.p_wilcoxon == pytest.approx(scipy.stats.wilcoxon([-0.8, 1.0]).pvalue)
    assert "oracle - random" not in set(summary.condition)  # no oracle runs
    tied = runs_table()
    tied.loc[tied.condition == "selected", "answer_loss"] = [1.8, 1.2]  # equal to random's means
    paired = selection_summary(tied).set_index("condition").loc["selected - random"]
    assert paired.sources == "selected has the lower loss on 0 of 2 targets (2 tied)" and np.isnan(paired.p_sign)


def test_similarity_against_loss_by_hand():
    table = similarity_vs_loss(runs_table()).set_index("target")
    # t1: similarities 0.9, 0.5, 0.3 against losses 1.0, 2.0, 1.6: ranks (3, 2, 1) vs (1, 3, 2): rho = -0.5.
    assert table.loc["t1", "rho"] == pytest.approx(-0.5) and table.loc["t1", "n_runs"] == 3
    assert table.loc["t1", "n_sets"] == 3
    assert table.loc["t2", "rho"] == pytest.approx(1.0)  # 0.8 -> 2.2, 0.2 -> 1.2
    assert table.loc["mean of 2 targets", "rho"] == pytest.approx(0.25)


CANDIDATES = ["plural", "uppercase", "reverse", "capitalize"]


def test_a_study_runs_ranks_resumes_and_keeps_its_folder(llama_dir, tmp_path):
    """The whole study on a tiny random model standing in for the base organism (one model, its
    weights restored before each run); the base model itself is the "none" condition."""
    model = load_model(str(llama_dir), dtype="float32")
    load = reloading(model)
    candidates = [load_task(f"organism/{n}") for n in CANDIDATES]
    targets = [load_task("organism/plural+uppercase"), load_task("organism/reverse")]
    config = small()
    lines = []
    result = data_selection(load, candidates, targets, config, tmp_path / "runs", log=lines.append)
    ranking, runs = result.ranking, result.runs
    assert len(ranking[ranking.target == "organism/reverse"]) == 3
    assert len(ranking[ranking.target == "organism/plural+uppercase"]) == 4
    counts = runs.groupby(["target", "condition"]).size().to_dict()
    assert counts == {
        ("organism/plural+uppercase", c): n
        for c, n in (("none", 1), ("selected", 1), ("random", 2), ("oracle", 1), ("target", 1))
    } | {("organism/reverse", c): n for c, n in (("none", 1), ("selected", 1), ("random", 2), ("target", 1))}
    for target, part in ranking.groupby("target"):
        top = " ".join(part.sort_values("rank").candidate[:2])
        assert set(runs[(runs.target == target) & (runs.condition == "selected")].sources) == {top}
        similarity = part.set_index("candidate").similarity
        for _, row in runs[(runs.target == target) & (runs.condition == "random")].iterrows():
            assert row.similarity_mean == pytest.approx(similarity[row.sources.split()].mean())
    assert set(runs[runs.condition == "oracle"].sources) == {"organism/plural organism/uppercase"}
    assert (runs.n_eval == 4).all() and runs.answer_loss.gt(0).all() and len(lines) == len(runs)
    # "none" is the base model itself, also after the runs before it changed and restored its weights.
    none = runs[runs.condition == "none"].set_index("target").answer_loss
    fresh = load_model(str(llama_dir), dtype="float32")
    held = pattern_subset(load_task("organism/reverse"), 4, n_train=8)
    assert none["organism/reverse"] == pytest.approx(answer_loss(fresh, held, instructed=True), rel=1e-6)
    assert runs[runs.condition != "none"].answer_loss.ne(none["organism/reverse"]).all()
    assert len(result.generations) == 4 * len(runs)
    assert (tmp_path / "runs" / "probe" / "organism__reverse" / "run.json").is_file()

    # A rerun finds every run done: nothing is trained or evaluated again, the tables are the same.
    lines.clear()
    again = data_selection(load, candidates, targets, config, tmp_path / "runs", log=lines.append)
    assert not lines and again.runs.equals(runs) and again.ranking.equals(ranking)
    with pytest.raises(ValueError, match="other settings"):
        data_selection(load, candidates, targets, dataclasses.replace(config, k=1), tmp_path / "runs")


def test_the_study_configs_are_frozen_and_checked_when_built_or_replaced():
    config = small()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.k = 3  # type: ignore[misc]
    for field, value, message in (
        ("steps", 0, "steps must be >= 1, got 0"),
        ("k", 8, "k must be <= 7, got 8"),  # the organism has eight candidates: one may be the target
        ("train_pairs", 0, "train_pairs must be >= 1, got 0"),
        ("seed", -1, "seed must be >= 0, got -1"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            dataclasses.replace(config, **{field: value})
    recipe = FinetuneConfig.lora()
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.lr = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match=re.escape("lora_rank must be > 0, got 0")):
        dataclasses.replace(recipe, lora_rank=0)
    assert dataclasses.replace(recipe, pattern_steps=(3, 1, 3)).pattern_steps == (1, 3)
