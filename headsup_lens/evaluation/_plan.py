"""`AnalysisPlan`: the rules a verdict is judged by, fixed in a file before the runs they judge.

A plan states, for every claim and task it judges, the primary metric, the test, the level α and how
it is corrected over seeds and claims, the seeds and the training budget, the smallest effect that
counts and what each outcome means. It is a frozen config read from and written to TOML
(`figures/<model>/analysis_plan.toml`); `AnalysisPlan.read` refuses a malformed file with a message
that names the file and the field. A verdict table records the sha256 of the plan file it was judged
by (`plan_sha256`) and whether its entry was written before its results (`preregistered`): an
entry written after its results were seen is exploratory, and says so.

The file's layout (every key is required unless marked optional):

```toml
name = "smollm2"                     # what the plan judges (a model's folder)
written = "2026-12-02"               # the day it was written (ISO date)
alpha = 0.05                         # family-wise level of each task's tests
correction = "fixed-sequence"        # or "bonferroni": how α is shared over claims (seeds: below)
sequence = ["elicits", "random", ...]  # the order claims are tested in (fixed-sequence)
confidence = 0.95                    # of every effect's interval
bootstrap_resamples = 2000           # percentile bootstrap over the examples
bootstrap_seed = 0
headline = "largest-conclusive-budget"

[metric]                             # the primary metric (App. B of the paper)
primary = "paper"
new_tokens = 10
echo_min_words = 5
robustness = ["strict"]

[paper_budget]                       # the budget a "does not reproduce" needs
steps = 6250
batch_size = 16

[outcomes.elicits]                   # one table per claim the plan judges
reproduces = "..."
does_not_reproduce = "..."
inconclusive = "..."

[[claims]]                           # one entry per claim, task and budget (and group of seeds)
claim = "elicits"
task = "sentiment"
steps = 300
batch_size = 16
seeds = [0, 1]
metric = "paper"
test = "mcnemar_exact"
min_effect = 0.10
preregistered = false
draws = 20                           # optional: the random control's planned draws
```
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import hashlib
import math
import os
import re
import sys
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .._io import atomic_write_text
from .._typecheck import checked

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # pyright: ignore[reportMissingImports]

# ------------------------------------------------------------------------------------------ vocabulary
# Each claim is judged by one test on one kind of measurement; a plan names both, and a plan that pairs
# a claim with another test or metric is refused (the rule that judges it would not be the one stated).
CLAIM_TESTS: dict[str, str] = {
    "elicits": "mcnemar_exact",  # masked vs original (and majority label, instructed) on the same examples
    "random": "permutation",  # the learned mask against random masks of its shape that keep fluency
    "specific": "mcnemar_exact",  # the task's own mask against every other task's mask, on the task
    "fig4": "wilcoxon_signed_rank",  # last layer's cosine to the instructed run, masked vs original
    "fig6": "bootstrap",  # the instructed loss's drop at alpha, against random head sets
    "fig2": "wilcoxon_signed_rank",  # switch step in weight order vs a random order of the same heads
}
CLAIM_METRICS: dict[str, tuple[str, ...]] = {
    "elicits": ("paper", "strict"),
    "random": ("paper", "strict"),
    "specific": ("paper", "strict"),
    "fig4": ("cosine",),
    "fig6": ("answer loss",),
    "fig2": ("switch step",),
}
PRIMARY_METRICS = ("paper", "strict")
CORRECTIONS = ("fixed-sequence", "bonferroni")
HEADLINE_RULES = ("largest-conclusive-budget",)
OUTCOMES = ("reproduces", "does_not_reproduce", "inconclusive")
INSTRUCTED_RULES = ("beat", "match")
NEUTRAL_TEXTS = ("xnli-en", "organism-instructed")


class PlanError(ValueError):
    """A plan file or value that cannot be judged by: the message names the file and the field."""


# ------------------------------------------------------------------------------------------ the config
@dataclass(frozen=True)
class MetricPlan:
    """The primary metric: the paper's protocol (App. B), or the strict matcher."""

    primary: str = "paper"
    """`paper`: greedy `new_tokens`, the answer contained in (or, for the paper's extraction,
    capitalisation and letter tasks, starting) the output as whole words, an echo of the input not a hit;
    `strict`: the output's first line is the answer."""
    new_tokens: int = 10
    """Greedy tokens per answer (the paper's 10)."""
    echo_min_words: int = 5
    """An answer inside a copy of this many consecutive input words (or of the whole input, if shorter) is an echo."""
    robustness: tuple[str, ...] = ("strict",)
    """Metrics reported beside the primary one (never judged by)."""


@dataclass(frozen=True)
class ControlsPlan:
    """How the random-mask control draws masks that keep the model fluent (the filter it states).

    A random mask keeps the learned mask's number of removed heads in every layer. Each layer's removed
    heads are drawn uniformly from its `pool` x (that many) heads of least first-order effect on the loss
    of the neutral text (the gradient of that loss with respect to a per-head scale of `hook_z`, at the
    full model), and a draw is kept when its loss on the neutral text is at most (1 + `fluency_tolerance`)
    times the learned mask's. `max_candidates` draws per kept mask at most: past that the control is
    not run."""

    neutral_text: str = "xnli-en"
    """`xnli-en`: the first `neutral_examples` distinct premises of XNLI dev (English), every token's
    loss; `organism-instructed`: the organism's other tasks with their instructions, answer loss."""
    neutral_examples: int = 32
    pool: float = 2.0
    fluency_tolerance: float = 0.10
    max_candidates: int = 10


@dataclass(frozen=True)
class CalibrationPlan:
    """The masks a calibration judges under the plan, on a model whose pathways are planted.

    Planted runs: masks learned on each task with `planted_seeds`. Null runs: masks learned on each task
    with its answers shuffled over its inputs (`shuffled_seeds`), the planted pathways of `other_pathways`
    other tasks (the next tasks in the plan's order), and `random_masks` fluency-kept random masks of the
    planted pathway's shape per task. Every run is judged as one seed's mask."""

    planted_seeds: tuple[int, ...] = (0, 1)
    shuffled_seeds: tuple[int, ...] = (0, 1)
    other_pathways: int = 1
    random_masks: int = 1


@checked
@dataclass(frozen=True)
class Outcomes:
    """What each outcome of one claim means, in a sentence each."""

    reproduces: str
    does_not_reproduce: str
    inconclusive: str


@dataclass(frozen=True)
class ClaimPlan:
    """One claim on one task at one budget, with the seeds it is judged on."""

    claim: str
    """The claim's key (`CLAIM_TESTS`)."""
    task: str
    """The task's name."""
    steps: int
    """Training steps of the masks judged."""
    batch_size: int
    """Examples per training step."""
    seeds: tuple[int, ...]
    """The seeds whose masks are judged: the rule's "half of the planned seeds" counts these."""
    metric: str
    """What the test is computed on (`CLAIM_METRICS`)."""
    test: str
    """The test (`CLAIM_TESTS`)."""
    min_effect: float
    """The smallest effect that counts (a difference in accuracy, cosine, relative loss drop or share of the
    sweep): "does not reproduce" needs the effect's interval to lie below it."""
    preregistered: bool
    """Whether this entry was committed before the results it judges."""
    draws: int | None = None
    """The random control's planned number of random masks (its p-value is at least 1 / (1 + draws))."""

    @property
    def examples(self) -> int:
        """The entry's training budget in examples (steps × batch size)."""
        return self.steps * self.batch_size

    @property
    def key(self) -> tuple[str, str, int, int]:
        """(claim, task, steps, batch size): what identifies the entry."""
        return (self.claim, self.task, self.steps, self.batch_size)


@dataclass(frozen=True)
class AnalysisPlan:
    """The rules of a set of verdicts, fixed before the runs they judge (see the module's docstring)."""

    name: str
    written: str
    claims: tuple[ClaimPlan, ...]
    outcomes: Mapping[str, Outcomes]
    alpha: float = 0.05
    correction: str = "fixed-sequence"
    instructed: str = "beat"
    """Where the instructed model beats the original, the masked model must `beat` it too (the same
    paired test), or `match` it (the interval of masked minus instructed lies above -min_effect)."""
    sequence: tuple[str, ...] = tuple(CLAIM_TESTS)
    confidence: float = 0.95
    bootstrap_resamples: int = 2000
    bootstrap_seed: int = 0
    headline: str = "largest-conclusive-budget"
    metric: MetricPlan = field(default_factory=MetricPlan)
    controls: ControlsPlan = field(default_factory=ControlsPlan)
    calibration: CalibrationPlan | None = None
    paper_steps: int = 6250
    paper_batch_size: int = 16
    source: str | None = field(default=None, compare=False)
    """The file the plan was read from (in error messages)."""
    sha256: str | None = field(default=None, compare=False)
    """The sha256 of that file's bytes (`plan_sha256` in a verdict table)."""

    def __post_init__(self) -> None:
        _validate(self)

    # ---------------------------------------------------------------------------------- queries
    @property
    def paper_examples(self) -> int:
        """The paper's training budget in examples (steps × batch size)."""
        return self.paper_steps * self.paper_batch_size

    def entries(self, claim: str | None = None, task: str | None = None) -> list[ClaimPlan]:
        """The plan's entries, optionally of one claim and/or one task, in the file's order."""
        return [c for c in self.claims if (claim is None or c.claim == claim) and (task is None or c.task == task)]

    def tasks(self) -> list[str]:
        """Every task the plan judges, in the order the file first names them."""
        return list(dict.fromkeys(c.task for c in self.claims))

    def family(self, entry: ClaimPlan) -> list[ClaimPlan]:
        """The entries that share α with `entry`: every claim of its task at its budget and seeds."""
        return [
            c
            for c in self.claims
            if c.task == entry.task
            and (c.steps, c.batch_size) == (entry.steps, entry.batch_size)
            and c.seeds == entry.seeds
        ]

    def level(self, entry: ClaimPlan) -> float:
        """The level of each of `entry`'s tests. `elicits` tests every seed's mask, at α over the seeds
        (Bonferroni); every other claim tests one mask (the first planned seed's that elicits the task).
        With `correction="fixed-sequence"` each claim then spends the whole α in `sequence` order, and a
        claim is tested only once every claim before it is established; with `"bonferroni"` α is also
        divided over the tests of the whole family (`family`)."""
        if self.correction == "bonferroni":
            return self.alpha / sum(_tests(c) for c in self.family(entry))
        return self.alpha / _tests(entry)

    # ---------------------------------------------------------------------------------- files
    @classmethod
    def read(cls, path: str | os.PathLike) -> AnalysisPlan:
        """The plan in a TOML file; a malformed file is a `PlanError` naming the file and the field."""
        path = Path(path)
        if not path.is_file():
            raise PlanError(f"{path}: no analysis plan there (a verdict is judged only by a plan written before it)")
        data = path.read_bytes()
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise PlanError(f"{path}: not UTF-8 text ({error})") from None
        except tomllib.TOMLDecodeError as error:
            raise PlanError(f"{path}: not valid TOML: {error}") from None
        return cls.from_dict(raw, source=str(path), sha256=hashlib.sha256(data).hexdigest())

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, source: str | None = None, sha256: str | None = None) -> AnalysisPlan:
        """A plan from the mapping a TOML file holds (`read`); unknown or missing keys are refused."""
        where = source or "analysis plan"
        try:
            return _from_dict(raw, source, sha256)
        except PlanError as error:
            raise PlanError(f"{where}: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        """The mapping `write` stores (the inverse of `from_dict`)."""
        out: dict[str, Any] = {
            "name": self.name,
            "written": self.written,
            "alpha": self.alpha,
            "correction": self.correction,
            "instructed": self.instructed,
            "sequence": list(self.sequence),
            "confidence": self.confidence,
            "bootstrap_resamples": self.bootstrap_resamples,
            "bootstrap_seed": self.bootstrap_seed,
            "headline": self.headline,
            "metric": {**dataclasses.asdict(self.metric), "robustness": list(self.metric.robustness)},
            "controls": dataclasses.asdict(self.controls),
            "paper_budget": {"steps": self.paper_steps, "batch_size": self.paper_batch_size},
            "outcomes": {claim: dataclasses.asdict(o) for claim, o in self.outcomes.items()},
            "claims": [],
        }
        if self.calibration is not None:
            calibration = dataclasses.asdict(self.calibration)
            out["calibration"] = {k: list(v) if isinstance(v, tuple) else v for k, v in calibration.items()}
        for c in self.claims:
            entry = {k: v for k, v in dataclasses.asdict(c).items() if v is not None}
            entry["seeds"] = list(c.seeds)
            out["claims"].append(entry)
        return out

    def write(self, path: str | os.PathLike, header: str = "") -> Path:
        """Write the plan as TOML (atomically), after `header` (comment lines, `#` added where missing)."""
        import tomli_w

        lines = [line if line.startswith("#") else f"# {line}".rstrip() for line in header.splitlines()]
        text = ("\n".join(lines) + "\n\n" if lines else "") + tomli_w.dumps(self.to_dict(), multiline_strings=False)
        return atomic_write_text(path, text)


# ------------------------------------------------------------------------------------------ reading
_TOP = {
    "name",
    "written",
    "alpha",
    "correction",
    "instructed",
    "sequence",
    "confidence",
    "bootstrap_resamples",
    "bootstrap_seed",
    "headline",
    "metric",
    "controls",
    "calibration",
    "paper_budget",
    "outcomes",
    "claims",
}
_CLAIM_FIELDS = {f.name for f in dataclasses.fields(ClaimPlan)}
_CLAIM_OPTIONAL = {"draws"}
_METRIC_FIELDS = {f.name for f in dataclasses.fields(MetricPlan)}
_CONTROLS_FIELDS = {f.name for f in dataclasses.fields(ControlsPlan)}
_CALIBRATION_FIELDS = {f.name for f in dataclasses.fields(CalibrationPlan)}


def _keys(where: str, table: Mapping[str, Any], allowed: set[str], optional: Set[str] = frozenset()) -> None:
    """An unknown field of `table` is refused (naming the closest allowed one), then a missing one."""
    for key in sorted(set(table) - allowed):
        close = difflib.get_close_matches(key, sorted(allowed), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; allowed: {', '.join(sorted(allowed))}"
        raise PlanError(f"{where}{key}: unknown field{hint}")
    for key in sorted(allowed - optional - set(table)):
        raise PlanError(f"{where}{key}: missing field")


def _table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if not isinstance(value, Mapping):
        raise PlanError(f"{key}: must be a table ([{key}]), got {type(value).__name__}")
    return value


_T = TypeVar("_T")


def _build(where: str, cls: type[_T], **values: Any) -> _T:
    """`cls(**values)`, a wrong-typed value a `PlanError` naming its field (the run-time type check of
    the constructor raises a `TypeError` naming the parameter)."""
    try:
        return cls(**values)
    except TypeError as error:
        text = str(error)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = re.escape(f.name)
            if re.search(rf"(?:parameter|argument) '?{name}'?[=\s]|\b{name}\b must", text):
                raise PlanError(f"{where}{f.name}: must be {f.type}, got {values.get(f.name)!r}") from None
        raise PlanError(f"{where.rstrip('.') or 'plan'}: {' '.join(text.split())}") from None


def _from_dict(raw: Mapping[str, Any], source: str | None, sha256: str | None) -> AnalysisPlan:
    if not isinstance(raw, Mapping):
        raise PlanError(f"must be a table of fields, got {type(raw).__name__}")
    _keys("", raw, _TOP, {"calibration"})
    metric = _table(raw, "metric")
    controls = _table(raw, "controls")
    _keys("controls.", controls, _CONTROLS_FIELDS)
    calibration = None
    if "calibration" in raw:
        table = _table(raw, "calibration")
        _keys("calibration.", table, _CALIBRATION_FIELDS)
        for key in ("planted_seeds", "shuffled_seeds"):
            if not isinstance(table[key], list):
                raise PlanError(f"calibration.{key}: must be a list of integers, got {type(table[key]).__name__}")
        calibration = _build(
            "calibration.",
            CalibrationPlan,
            **{
                **table,
                "planted_seeds": tuple(table["planted_seeds"]),
                "shuffled_seeds": tuple(table["shuffled_seeds"]),
            },
        )
    _keys("metric.", metric, _METRIC_FIELDS, _METRIC_FIELDS)
    budget = _table(raw, "paper_budget")
    _keys("paper_budget.", budget, {"steps", "batch_size"})
    outcomes_raw = _table(raw, "outcomes")
    outcomes = {}
    for claim, texts in outcomes_raw.items():
        if not isinstance(texts, Mapping):
            raise PlanError(f"outcomes.{claim}: must be a table, got {type(texts).__name__}")
        _keys(f"outcomes.{claim}.", texts, set(OUTCOMES))
        outcomes[claim] = _build(f"outcomes.{claim}.", Outcomes, **{k: texts[k] for k in OUTCOMES})
    claims_raw = raw["claims"]
    if not isinstance(claims_raw, list):
        raise PlanError(f"claims: must be an array of tables ([[claims]]), got {type(claims_raw).__name__}")
    claims = []
    for i, entry in enumerate(claims_raw):
        where = f"claims[{i}]."
        if not isinstance(entry, Mapping):
            raise PlanError(f"claims[{i}]: must be a table, got {type(entry).__name__}")
        _keys(where, entry, _CLAIM_FIELDS, _CLAIM_OPTIONAL)
        seeds = entry["seeds"]
        if not isinstance(seeds, list):
            raise PlanError(f"{where}seeds: must be a list of integers, got {type(seeds).__name__}")
        claims.append(_build(where, ClaimPlan, **{**entry, "seeds": tuple(seeds)}))
    written = raw["written"]
    if isinstance(written, datetime.date):
        written = written.isoformat()
    sequence = raw["sequence"]
    if not isinstance(sequence, list):
        raise PlanError(f"sequence: must be a list of claims, got {type(sequence).__name__}")
    robustness = metric.get("robustness", list(MetricPlan.robustness))
    if not isinstance(robustness, list):
        raise PlanError(f"metric.robustness: must be a list of metrics, got {type(robustness).__name__}")
    return _build(
        "",
        AnalysisPlan,
        name=raw["name"],
        written=written,
        claims=tuple(claims),
        outcomes=outcomes,
        alpha=raw["alpha"],
        correction=raw["correction"],
        instructed=raw["instructed"],
        sequence=tuple(sequence),
        confidence=raw["confidence"],
        bootstrap_resamples=raw["bootstrap_resamples"],
        bootstrap_seed=raw["bootstrap_seed"],
        headline=raw["headline"],
        metric=_build("metric.", MetricPlan, **{**metric, "robustness": tuple(robustness)}),
        controls=_build("controls.", ControlsPlan, **controls),
        calibration=calibration,
        paper_steps=budget["steps"],
        paper_batch_size=budget["batch_size"],
        source=source,
        sha256=sha256,
    )


# ------------------------------------------------------------------------------------------ checks
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _need(ok: bool, field_name: str, message: str, value: Any) -> None:
    if not ok:
        raise PlanError(f"{field_name}: {message}, got {value!r}")


def _integer(field_name: str, value: Any, minimum: int) -> None:
    _need(_is_int(value) and value >= minimum, field_name, f"must be an integer >= {minimum}", value)


def _number(field_name: str, value: Any, minimum: int) -> None:
    _need(_is_number(value) and value >= minimum, field_name, f"must be a number >= {minimum:g}", value)


def _text(field_name: str, value: Any) -> None:
    _need(isinstance(value, str) and value.strip() != "", field_name, "must be a non-empty string", value)


def _choice(field_name: str, value: Any, choices: tuple[str, ...]) -> None:
    _need(isinstance(value, str) and value in choices, field_name, f"must be one of {', '.join(choices)}", value)


def _validate(plan: AnalysisPlan) -> None:
    """Every value of a plan in range, named by its field (`claims[3].alpha`), before any judging."""
    _text("name", plan.name)
    _text("written", plan.written)
    try:
        datetime.date.fromisoformat(plan.written)
    except ValueError:
        raise PlanError(f"written: must be an ISO date (2026-12-02), got {plan.written!r}") from None
    _need(_is_number(plan.alpha) and 0 < plan.alpha < 0.5, "alpha", "must be a number in (0, 0.5)", plan.alpha)
    _choice("correction", plan.correction, CORRECTIONS)
    _choice("instructed", plan.instructed, INSTRUCTED_RULES)
    _need(
        _is_number(plan.confidence) and 0.5 < plan.confidence < 1,
        "confidence",
        "must be a number in (0.5, 1)",
        plan.confidence,
    )
    _integer("bootstrap_resamples", plan.bootstrap_resamples, 100)
    _integer("bootstrap_seed", plan.bootstrap_seed, 0)
    _choice("headline", plan.headline, HEADLINE_RULES)
    for name, value in (("paper_budget.steps", plan.paper_steps), ("paper_budget.batch_size", plan.paper_batch_size)):
        _integer(name, value, 1)
    m = plan.metric
    _choice("metric.primary", m.primary, PRIMARY_METRICS)
    _integer("metric.new_tokens", m.new_tokens, 1)
    _integer("metric.echo_min_words", m.echo_min_words, 1)
    for i, name in enumerate(m.robustness):
        _choice(f"metric.robustness[{i}]", name, PRIMARY_METRICS)
    _need(m.primary not in m.robustness, "metric.robustness", "must not repeat the primary metric", list(m.robustness))
    k = plan.controls
    _choice("controls.neutral_text", k.neutral_text, NEUTRAL_TEXTS)
    _integer("controls.neutral_examples", k.neutral_examples, 1)
    _number("controls.pool", k.pool, 1)
    _number("controls.fluency_tolerance", k.fluency_tolerance, 0)
    _integer("controls.max_candidates", k.max_candidates, 1)
    if plan.calibration is not None:
        c = plan.calibration
        for name in ("planted_seeds", "shuffled_seeds"):
            seeds = getattr(c, name)
            _need(
                isinstance(seeds, tuple)
                and len(set(seeds)) == len(seeds)
                and all(_is_int(v) and v >= 0 for v in seeds),
                f"calibration.{name}",
                "must be a list of distinct integers >= 0",
                seeds,
            )
        for name in ("other_pathways", "random_masks"):
            _integer(f"calibration.{name}", getattr(c, name), 0)
    _need(
        isinstance(plan.sequence, tuple) and len(set(plan.sequence)) == len(plan.sequence),
        "sequence",
        "must name each claim once",
        list(plan.sequence),
    )
    for i, claim in enumerate(plan.sequence):
        _choice(f"sequence[{i}]", claim, tuple(CLAIM_TESTS))
    _need(len(plan.claims) > 0, "claims", "must hold at least one entry ([[claims]])", list(plan.claims))
    for claim, outcomes in plan.outcomes.items():
        _choice("outcomes", claim, tuple(CLAIM_TESTS))
        for name in OUTCOMES:
            _text(f"outcomes.{claim}.{name}", getattr(outcomes, name))
    seen: dict[tuple[str, str, int, int], list[tuple[int, set[int]]]] = {}
    for i, c in enumerate(plan.claims):
        _check_claim(plan, i, c)
        for j, seeds in seen.get(c.key, []):
            shared = sorted(seeds & set(c.seeds))
            _need(
                not shared,
                f"claims[{i}].seeds",
                f"repeat seeds {shared} of claims[{j}] (same claim, task and budget)",
                list(c.seeds),
            )
        seen.setdefault(c.key, []).append((i, set(c.seeds)))


def _check_claim(plan: AnalysisPlan, i: int, c: ClaimPlan) -> None:
    where = f"claims[{i}]."
    _choice(where + "claim", c.claim, tuple(CLAIM_TESTS))
    _need(c.claim in plan.sequence, where + "claim", "must be listed in sequence", c.claim)
    _need(c.claim in plan.outcomes, where + "claim", f"has no [outcomes.{c.claim}] table", c.claim)
    _text(where + "task", c.task)
    for name in ("steps", "batch_size"):
        _integer(where + name, getattr(c, name), 1)
    _need(
        isinstance(c.seeds, tuple) and len(c.seeds) > 0 and all(_is_int(s) and s >= 0 for s in c.seeds),
        where + "seeds",
        "must be a non-empty list of integers >= 0",
        list(c.seeds) if isinstance(c.seeds, tuple) else c.seeds,
    )
    _need(len(set(c.seeds)) == len(c.seeds), where + "seeds", "must not repeat a seed", list(c.seeds))
    _choice(where + "test", c.test, (CLAIM_TESTS[c.claim],))
    _choice(where + "metric", c.metric, CLAIM_METRICS[c.claim])
    high = 1.0 if c.claim in ("elicits", "random", "specific", "fig2", "fig6") else 2.0
    _need(
        _is_number(c.min_effect) and 0 < c.min_effect <= high,
        where + "min_effect",
        f"must be a number in (0, {high:g}]",
        c.min_effect,
    )
    _need(isinstance(c.preregistered, bool), where + "preregistered", "must be true or false", c.preregistered)
    if c.draws is not None or c.claim == "random":
        _need(
            isinstance(c.draws, int) and not isinstance(c.draws, bool) and c.draws >= 1,
            where + "draws",
            "must be an integer >= 1 (the random control's masks)",
            c.draws,
        )
        # The permutation p-value is at least 1 / (1 + draws): a plan whose draws cannot reach its level
        # could never establish the control, so it is refused rather than read as a failure later.
        assert c.draws is not None
        level = plan.level(c)
        _need(
            1 / (1 + c.draws) < level,
            where + "draws",
            f"cannot reach the level {level:.3g} (p >= 1 / (1 + draws)); plan at least {math.floor(1 / level)} draws",
            c.draws,
        )


def _tests(entry: ClaimPlan) -> int:
    """How many tests an entry runs: one per seed for `elicits`, one mask otherwise."""
    return len(entry.seeds) if entry.claim == "elicits" else 1


def plan_path(folder: str | os.PathLike) -> Path:
    """Where a results folder keeps its plan: `<folder>/analysis_plan.toml`."""
    return Path(folder) / "analysis_plan.toml"
