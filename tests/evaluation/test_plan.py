"""`AnalysisPlan`: the committed plans read and round-trip through TOML, and a malformed plan is refused
with a `PlanError` that names the file and the field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import tomli_w
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st

from headsup_lens.evaluation._plan import AnalysisPlan, PlanError, plan_path
from headsup_lens.reproduce._verdicts import claim_verdicts

FIGURES = Path(__file__).resolve().parents[2] / "figures"
PLANS = sorted(FIGURES.glob("*/analysis_plan.toml"))


def _raw(name: str = "organism") -> dict:
    return tomllib.loads((FIGURES / name / "analysis_plan.toml").read_text(encoding="utf-8"))


def _write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "analysis_plan.toml"
    path.write_bytes(tomli_w.dumps(raw).encode())
    return path


def test_every_model_folder_has_a_plan():
    assert {p.parent.name for p in PLANS} >= {"smollm2", "gemma3-270m", "organism"}


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.parent.name)
def test_a_committed_plan_reads_and_round_trips(path, tmp_path):
    plan = AnalysisPlan.read(path)
    assert plan.sha256 is not None and len(plan.sha256) == 64
    again = AnalysisPlan.read(plan.write(tmp_path / "again.toml"))
    assert again == plan
    assert plan.claims and all(c.task and c.seeds for c in plan.claims)


def _set(raw: dict, dotted: str, value) -> dict:
    raw = copy.deepcopy(raw)
    *parents, last = dotted.replace("[", ".").replace("]", "").split(".")
    here = raw
    for key in parents:
        here = here[int(key)] if key.isdigit() else here[key]
    if value is _DELETE:
        del here[last]
    else:
        here[int(last) if last.isdigit() else last] = value
    return raw


_DELETE = object()
BAD = [
    ("alpha", 1.5, "alpha"),
    ("alpha", "0.05", "alpha"),
    ("correction", "holm", "correction"),
    ("instructed", "ignore", "instructed"),
    ("headline", "latest", "headline"),
    ("bootstrap_resamples", 0, "bootstrap_resamples"),
    ("sequence", "elicits", "sequence"),
    ("metric.primary", "substring", "metric.primary"),
    ("metric.echo_min_words", 0, "metric.echo_min_words"),
    ("controls.pool", 0.5, "controls.pool"),
    ("controls.neutral_text", "wikipedia", "controls.neutral_text"),
    ("controls.max_candidates", _DELETE, "controls.max_candidates"),
    ("paper_budget.steps", -1, "paper_budget"),
    ("calibration.planted_seeds", 3, "calibration.planted_seeds"),
    ("claims[0].claim", "fig9", "claims[0].claim"),
    ("claims[0].seeds", [], "claims[0].seeds"),
    ("claims[0].seeds", [1, 1], "claims[0].seeds"),
    ("claims[0].steps", "300", "claims[0].steps"),
    ("claims[0].min_effect", 0, "claims[0].min_effect"),
    ("claims[0].preregistered", "yes", "claims[0].preregistered"),
    ("claims[0].test", "t-test", "claims[0].test"),
    ("claims[0].metric", "bleu", "claims[0].metric"),
    ("claims[0].task", _DELETE, "claims[0]"),
    ("claims[1].draws", 19, "claims[1].draws"),  # p >= 1/20 can never be below 0.05
    ("claims[0].colour", "red", "colour"),
    ("outcomes.elicits.inconclusive", _DELETE, "outcomes.elicits"),
    ("name", _DELETE, "name"),
    ("surprise", 1, "surprise"),
]


@pytest.mark.parametrize(("field", "value", "named"), BAD, ids=[b[0] + "=" + repr(b[1])[:12] for b in BAD])
def test_a_malformed_plan_is_refused_naming_the_field(field, value, named, tmp_path):
    raw = _raw()
    assert raw["claims"][1]["claim"] == "random"  # the draws case edits the random entry
    path = _write(tmp_path, _set(raw, field, value))
    with pytest.raises(PlanError) as error:
        AnalysisPlan.read(path)
    message = str(error.value)
    assert str(path) in message and named in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"alpha = = 1", "not valid TOML"), (b"\xff\xfe name", "not UTF-8"), (b"", "missing field")],
)
def test_an_unreadable_plan_is_refused(content, says, tmp_path):
    path = tmp_path / "analysis_plan.toml"
    path.write_bytes(content)
    with pytest.raises(PlanError, match=says):
        AnalysisPlan.read(path)


def test_no_plan_no_verdict(tmp_path):
    with pytest.raises(PlanError, match="no analysis plan"):
        claim_verdicts(tmp_path)
    with pytest.raises(PlanError, match="no analysis plan"):
        AnalysisPlan.read(plan_path(tmp_path))


@settings(max_examples=40, deadline=None)
@given(
    alpha=st.floats(0.001, 0.45),
    seeds=st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True),
    min_effect=st.floats(0.01, 1.0),
    steps=st.integers(1, 10_000),
    preregistered=st.booleans(),
)
def test_any_well_formed_plan_round_trips(tmp_path_factory, alpha, seeds, min_effect, steps, preregistered):
    raw = _raw()
    for claim in raw["claims"]:
        claim.update(seeds=seeds, min_effect=min_effect, steps=steps, preregistered=preregistered)
        if claim["claim"] == "random":
            claim["draws"] = int(1 / (alpha / 1)) + 1
    raw["alpha"] = alpha
    path = _write(tmp_path_factory.mktemp("plan"), raw)
    plan = AnalysisPlan.read(path)
    assert AnalysisPlan.read(plan.write(path.with_name("again.toml"))) == plan
    assert plan.level(plan.entries("elicits")[0]) == pytest.approx(alpha / len(seeds))


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(["alpha", "confidence", "claims[0].min_effect", "claims[0].steps", "controls.pool"]),
    value=st.one_of(st.text(max_size=5), st.booleans(), st.floats(-10, -0.001), st.lists(st.integers(), max_size=2)),
)
def test_a_wrong_value_anywhere_is_a_plan_error_not_a_crash(tmp_path_factory, field, value):
    path = _write(tmp_path_factory.mktemp("plan"), _set(_raw(), field, value))
    with pytest.raises(PlanError, match=field.replace("[", r"\[").replace("]", r"\]")):
        AnalysisPlan.read(path)
