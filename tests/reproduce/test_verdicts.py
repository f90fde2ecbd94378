"""`claim_verdicts` judged by a plan on constructed tables whose truth is known: each outcome
(`reproduces`, `does not reproduce`, `inconclusive`, `not elicited at this budget`, `cannot be tested
here`, `not run`) where its rule says so; a damaged table is a ValueError naming the file; and the
committed verdicts are the committed plan's rules applied to the committed tables."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomllib
import torch

from headsup_lens import HeadMask
from headsup_lens.evaluation._plan import AnalysisPlan
from headsup_lens.evaluation._rules import (
    DOES_NOT,
    INCONCLUSIVE,
    NOT_AT_BUDGET,
    NOT_RUN,
    REPRODUCES,
    UNTESTABLE,
    headline_rows,
    judge_elicits,
    judge_random,
)
from headsup_lens.reproduce._verdicts import COLUMNS, claim_verdicts

FIGURES = Path(__file__).resolve().parents[2] / "figures"
TASK, STEM = "organism/uppercase", "organism__uppercase"
N = 100
CLAIMS = ("elicits", "random", "specific", "fig4")


def plan(seeds=(0, 1), steps=300, instructed="beat", **top) -> AnalysisPlan:
    """Gemma-3's committed plan (every claim's entry) with entries for `TASK` only."""
    raw = tomllib.loads((FIGURES / "gemma3-270m" / "analysis_plan.toml").read_text(encoding="utf-8"))
    template = {c["claim"]: c for c in raw["claims"]}
    raw["claims"] = [
        copy.deepcopy(template[claim]) | {"task": TASK, "steps": steps, "seeds": list(seeds)} for claim in CLAIMS
    ]
    raw |= {"instructed": instructed} | top
    return AnalysisPlan.from_dict(raw, source="test plan", sha256="0" * 64)


def hits(k: int, offset: int = 0) -> np.ndarray:
    return np.array([(i - offset) % N < k for i in range(N)])


def outputs(flags: np.ndarray) -> list[tuple[str, str, str]]:
    """(input, answer, output) per example: a hit outputs the answer, a miss something else."""
    return [(f"word{i}", f"WORD{i}", f"WORD{i}" if flag else "nothing") for i, flag in enumerate(flags)]


def write(
    folder: Path,
    *,
    masked: dict[int, int] | None = None,
    instructed: int = 0,
    steps: int = 300,
    draws: list[int] | None = None,
    others: dict[str, int] | None = None,
    cosines: tuple[float, float] = (0.9, 0.8),
) -> Path:
    """A model folder's tables of `TASK`: each seed's masked hits (`masked`: seed -> hits), `draws` hits
    of the fluency-kept random masks, `others` hits of other tasks' masks, Fig. 4 cosines."""
    masked = {0: 40, 1: 40} if masked is None else masked
    (folder / "masks").mkdir(parents=True, exist_ok=True)
    settings = {"original": hits(0), "instructed": hits(instructed, offset=50)}
    for seed, k in masked.items():
        suffix = "" if seed == 0 else f"_seed{seed}"
        HeadMask(torch.ones(2, 3), metadata={"task": TASK, "steps": steps, "batch_size": 16}).save(
            folder / "masks" / f"{STEM}{suffix}.safetensors"
        )
        settings["masked" if seed == 0 else f"masked, seed {seed}"] = hits(k)
    rows, texts = [], []
    for setting, flags in settings.items():
        rows.append({"task": TASK, "setting": setting, "accuracy": flags.mean(), "n_examples": N})
        texts += [
            {"task": TASK, "setting": setting, "example": i, "input": x, "answer": a, "output": o}
            for i, (x, a, o) in enumerate(outputs(flags))
        ]
    pd.DataFrame(rows).to_csv(folder / f"tables12_evaluation_{STEM}.csv", index=False)
    pd.DataFrame(texts).to_csv(folder / f"tables12_generations_{STEM}.csv", index=False)
    if draws is not None:
        table = [{"mask": "learned", "draw": -1}] + [{"mask": "random", "draw": k} for k in range(len(draws))]
        pd.DataFrame(table).to_csv(folder / f"random_masks_fluent_{STEM}.csv", index=False)
        generated = [("learned", -1, hits(masked[0]))] + [("random", k, hits(v)) for k, v in enumerate(draws)]
        pd.DataFrame(
            [
                {"mask": kind, "draw": k, "example": i, "input": x, "answer": a, "output": o}
                for kind, k, flags in generated
                for i, (x, a, o) in enumerate(outputs(flags))
            ]
        ).to_csv(folder / f"random_masks_fluent_generations_{STEM}.csv", index=False)
    if others is not None:
        pd.DataFrame(
            [
                {"task": TASK, "mask_task": name, "example": i, "input": x, "answer": a, "output": o}
                for name, k in others.items()
                for i, (x, a, o) in enumerate(outputs(hits(k)))
            ]
        ).to_csv(folder / "cross_task_generations_t.csv", index=False)
    rng = np.random.default_rng(0)
    similarity = [
        {"layer": layer, "comparison": comparison, "block_out": cosine + rng.normal(0, 0.01), "example": i}
        for layer in (0, 5)
        for comparison, cosine in zip(("masked vs instructed", "original vs instructed"), cosines)
        for i in range(20)
    ]
    pd.DataFrame(similarity).to_csv(folder / f"fig4_similarity_{STEM}.csv", index=False)
    return folder


def verdicts(folder: Path, p: AnalysisPlan | None = None) -> dict[str, str]:
    table = claim_verdicts(folder, p or plan())
    assert list(table.columns) == list(COLUMNS)
    return table.set_index("claim").verdict.to_dict()


FULL = {"draws": [0] * 20, "others": {"organism/reverse": 0, "organism/plural": 2}}


# ------------------------------------------------------------------ every outcome where its rule says so
def test_every_claim_reproduces_where_the_tables_show_it(tmp_path):
    table = claim_verdicts(write(tmp_path, **FULL), plan())
    assert table.verdict.tolist() == [REPRODUCES] * 4
    assert table.plan_sha256.eq("0" * 64).all() and table.metric.eq("paper").all()
    assert table.accuracy.iloc[0] == pytest.approx(0.40)
    assert table.ci_low.iloc[0] < 0.40 < table.ci_high.iloc[0]


def test_no_effect_at_the_papers_budget_does_not_reproduce_and_below_it_is_not_elicited(tmp_path):
    at_paper = write(tmp_path / "paper", masked={0: 0, 1: 0}, steps=6250, **FULL)
    assert verdicts(at_paper, plan(steps=6250))["elicits"] == DOES_NOT
    fast = write(tmp_path / "fast", masked={0: 0, 1: 0}, **FULL)
    found = verdicts(fast)
    assert found["elicits"] == NOT_AT_BUDGET
    assert {found[c] for c in CLAIMS[1:]} == {UNTESTABLE}  # the sequence stops at the first claim


def test_an_effect_the_test_cannot_see_nor_rule_out_is_inconclusive(tmp_path):
    # 6 hits against 0: exact McNemar p = 2 / 2**6 = 0.031, above alpha / 2 seeds, while the
    # effect's interval reaches past the smallest effect that counts (0.10)
    folder = write(tmp_path, masked={0: 6, 1: 6}, steps=6250, **FULL)
    row = claim_verdicts(folder, plan(steps=6250)).iloc[0]
    assert row.verdict == INCONCLUSIVE
    assert row.p_value == pytest.approx(2 / 2**6) and row.p_value > row.level
    assert row.effect_high > 0.10


def test_half_of_the_seeds_is_enough_and_fewer_is_not(tmp_path):
    half = write(tmp_path / "half", masked={0: 0, 1: 40}, **FULL)
    assert verdicts(half)["elicits"] == REPRODUCES
    third = write(tmp_path / "third", masked={0: 0, 1: 40, 2: 0}, **FULL)
    assert verdicts(third, plan(seeds=(0, 1, 2)))["elicits"] != REPRODUCES


def test_the_instructed_model_counts_only_where_it_beats_the_original(tmp_path):
    strong = write(tmp_path / "strong", instructed=80, **FULL)
    assert verdicts(strong)["elicits"] != REPRODUCES  # 0.40 does not beat an instructed 0.80
    assert verdicts(strong, plan(instructed="match"))["elicits"] != REPRODUCES
    weak = write(tmp_path / "weak", instructed=1, **FULL)  # instructed 0.01 does not beat the original
    assert verdicts(weak)["elicits"] == REPRODUCES


def test_a_label_task_must_beat_the_majority_label():
    p = plan(seeds=(0,))
    entry = p.entries("elicits")[0]
    found = judge_elicits(p, entry, {0: hits(40)}, hits(0), None, majority=hits(50))
    assert found.verdict != REPRODUCES and "majority label 0.50" in found.evidence
    assert judge_elicits(p, entry, {0: hits(40)}, hits(0), None, majority=hits(10)).verdict == REPRODUCES


def test_the_random_control_needs_its_draws_to_fall_behind(tmp_path):
    assert verdicts(write(tmp_path / "a", draws=[40] + [0] * 19, others=FULL["others"]))["random"] != REPRODUCES
    p = plan()
    entry = p.entries("random")[0]
    judged = judge_random(p, entry, hits(40), [hits(0)] * 20)
    assert judged.verdict == REPRODUCES and judged.p == pytest.approx(1 / 21)
    assert judge_random(p, entry, hits(40), [hits(45)] * 20).p == 1.0


def test_a_failed_control_stops_the_sequence_and_a_missing_one_spends_nothing(tmp_path):
    failed = verdicts(write(tmp_path / "failed", draws=[40] * 20, others=FULL["others"]))
    assert failed["random"] != REPRODUCES and failed["specific"] == failed["fig4"] == UNTESTABLE
    missing = verdicts(write(tmp_path / "missing", others=FULL["others"]))
    assert missing["random"] == NOT_RUN and missing["specific"] == REPRODUCES


def test_a_shared_format_is_not_specific(tmp_path):
    found = verdicts(write(tmp_path, draws=FULL["draws"], others={"organism/reverse": 40}))
    assert found["specific"] != REPRODUCES


def test_a_planned_seed_not_trained_is_not_run(tmp_path):
    found = verdicts(write(tmp_path, masked={0: 40}, **FULL))
    assert found["elicits"] == NOT_RUN


def test_a_seed_not_yet_in_shows_the_others_against_what_the_rule_compares(tmp_path):
    def interim(folder: Path) -> str:
        table = claim_verdicts(folder, plan()).set_index("claim")
        assert table.verdict["elicits"] == NOT_RUN
        return table.evidence["elicits"]

    strong = interim(write(tmp_path / "strong", masked={0: 40}, instructed=80, **FULL))
    assert "so far, not a verdict: seed 0 masked 0.40 against original 0.00 (ahead, p = " in strong
    assert "instructed 0.80 (behind, p = " in strong  # it beats the original: the rule compares with it
    weak = interim(write(tmp_path / "weak", masked={0: 40}, instructed=1, **FULL))
    assert "original 0.00" in weak and "instructed" not in weak  # it does not: the rule will not


def test_the_headline_is_the_largest_conclusive_budget():
    p = plan()
    rows = [
        {"task": "t", "claim": "elicits", "examples": 4800, "preregistered": True, "verdict": REPRODUCES},
        {"task": "t", "claim": "elicits", "examples": 100000, "preregistered": False, "verdict": INCONCLUSIVE},
        {"task": "u", "claim": "elicits", "examples": 4800, "preregistered": False, "verdict": INCONCLUSIVE},
        {"task": "u", "claim": "elicits", "examples": 4800, "preregistered": True, "verdict": INCONCLUSIVE},
        {"task": "v", "claim": "elicits", "examples": 100000, "preregistered": False, "verdict": DOES_NOT},
        {"task": "v", "claim": "elicits", "examples": 4800, "preregistered": True, "verdict": REPRODUCES},
        {"task": "w", "claim": "elicits", "examples": 100000, "preregistered": True, "verdict": NOT_RUN},
        {"task": "w", "claim": "elicits", "examples": 4800, "preregistered": False, "verdict": INCONCLUSIVE},
        {"task": "x", "claim": "elicits", "examples": 100000, "preregistered": True, "verdict": NOT_RUN},
    ]
    assert headline_rows(rows, p) == [True, False, False, True, True, False, False, True, True]


# ------------------------------------------------------------------ damaged tables are named
def _damage_nan(folder: Path) -> Path:
    path = folder / f"tables12_evaluation_{STEM}.csv"
    table = pd.read_csv(path)
    table.loc[table.setting == "masked", "accuracy"] = np.nan
    table.to_csv(path, index=False)
    return path


def _damage_header_only(folder: Path) -> Path:
    path = folder / f"tables12_generations_{STEM}.csv"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    return path


def _damage_no_original(folder: Path) -> Path:
    path = folder / f"tables12_evaluation_{STEM}.csv"
    table = pd.read_csv(path)
    table.loc[table.setting != "original"].to_csv(path, index=False)
    return path


def _damage_no_output(folder: Path) -> Path:
    path = folder / f"tables12_generations_{STEM}.csv"
    pd.read_csv(path).drop(columns="output").to_csv(path, index=False)
    return path


def _damage_truncated_fig4(folder: Path) -> Path:
    path = folder / f"fig4_similarity_{STEM}.csv"
    text = path.read_text()
    path.write_text(text[: len(text) // 2] + '\n"0,masked')
    return path


def _damage_missing_examples(folder: Path) -> Path:
    path = folder / f"tables12_generations_{STEM}.csv"
    table = pd.read_csv(path)
    table.drop(index=table.index[table.setting == "masked"][:5]).to_csv(path, index=False)
    return path


def _damage_binary(folder: Path) -> Path:
    path = folder / f"random_masks_fluent_generations_{STEM}.csv"
    path.write_bytes(b"\x00\xff\xfe" * 50)
    return path


@pytest.mark.parametrize(
    "damage",
    [
        _damage_nan,
        _damage_header_only,
        _damage_no_original,
        _damage_no_output,
        _damage_truncated_fig4,
        _damage_missing_examples,
        _damage_binary,
    ],
    ids=lambda f: f.__name__.removeprefix("_damage_"),
)
def test_a_damaged_table_is_a_value_error_naming_it(damage, tmp_path):
    folder = write(tmp_path, **FULL)
    path = damage(folder)
    with pytest.raises(ValueError) as error:
        claim_verdicts(folder, plan())
    assert str(path) in str(error.value) and "damaged" in str(error.value)


# ------------------------------------------------------------------ the committed verdicts
@pytest.mark.parametrize("model", ["smollm2", "gemma3-270m"])
def test_the_committed_verdicts_are_the_plans_rules_on_the_committed_tables(model):
    folder = FIGURES / model
    committed = pd.read_csv(folder / "verdicts.csv", keep_default_na=False, na_values=[""])
    fresh = claim_verdicts(folder)
    assert list(committed.columns) == list(COLUMNS)
    key = ["task", "claim", "steps", "batch_size", "seed_list"]
    pd.testing.assert_frame_equal(
        committed[[*key, "verdict", "headline", "preregistered", "plan_sha256"]].astype(str),
        fresh[[*key, "verdict", "headline", "preregistered", "plan_sha256"]].astype(str),
    )
    np.testing.assert_allclose(committed.accuracy, fresh.accuracy, atol=1e-9)
    np.testing.assert_allclose(committed.p_value, fresh.p_value, rtol=1e-9)
