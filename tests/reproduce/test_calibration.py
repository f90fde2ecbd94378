"""The rules calibrated on the organism: shuffled tasks keep their inputs and answers but not their
pairing, and the committed calibration table is its runs' table summarised again, with at least 20
null and 10 planted runs and a false-"reproduces" rate of the elicitation rule at most alpha."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from headsup_lens.data import load_task
from headsup_lens.evaluation._plan import AnalysisPlan
from headsup_lens.reproduce._calibration import NULL, PLANTED, calibration_table, shuffled_task

ORGANISM = Path(__file__).resolve().parents[2] / "figures" / "organism"
TABLE, RUNS = ORGANISM / "verdict_calibration.csv", ORGANISM / "verdict_calibration_runs.csv"


def test_a_shuffled_task_keeps_its_inputs_and_answers_but_not_their_pairing():
    task = load_task("organism/reverse")
    shuffled = shuffled_task(task, seed=3)
    assert [x for x, _ in shuffled.train_pairs] == [x for x, _ in task.train_pairs]
    assert Counter(y for _, y in shuffled.train_pairs) == Counter(y for _, y in task.train_pairs)
    same = sum(a == b for a, b in zip(shuffled.train_pairs, task.train_pairs))
    assert same < len(task.train_pairs) / 4
    assert shuffled.eval_pairs == task.eval_pairs  # judged on the task's own held-out pairs
    assert shuffled_task(task, seed=3).pairs == shuffled.pairs != shuffled_task(task, seed=4).pairs


def test_the_table_counts_reproduces_with_exact_intervals():
    plan = AnalysisPlan.read(ORGANISM / "analysis_plan.toml")
    runs = pd.DataFrame(
        {
            "kind": [NULL] * 20 + [PLANTED] * 10,
            "elicits": ["not elicited at this budget"] * 19 + ["reproduces"] + ["reproduces"] * 10,
            "elicits_beat": ["inconclusive"] * 30,
            "random": ["not run"] * 2 + ["inconclusive"] * 28,
            "specific": ["reproduces"] * 30,
        }
    )
    table = calibration_table(runs, plan).set_index(["claim", "kind"])
    null = table.loc[("elicits", NULL)]
    assert (null.runs, null.reproduces, null.rate) == (20, 1, 0.05)
    assert null.ci_low == pytest.approx(0.00127, abs=1e-4) and null.ci_high == pytest.approx(0.2487, abs=1e-3)
    assert table.loc[("elicits", PLANTED)].ci_low == pytest.approx(0.6915, abs=1e-3)  # 10 of 10
    assert table.loc[("random", NULL)].runs == 18 and table.loc[("random", NULL)].not_run == 2


@pytest.mark.skipif(not TABLE.is_file(), reason="the calibration has not been committed")
def test_the_committed_calibration_holds_the_false_rate_at_most_alpha():
    plan = AnalysisPlan.read(ORGANISM / "analysis_plan.toml")
    runs = pd.read_csv(RUNS, keep_default_na=False, na_values=[""])
    committed = pd.read_csv(TABLE, keep_default_na=False, na_values=[""])
    again = calibration_table(runs, plan)
    pd.testing.assert_frame_equal(committed[again.columns], again, check_dtype=False)
    assert (runs.plan_sha256 == plan.sha256).all() and (committed.plan_sha256 == plan.sha256).all()
    kinds = runs.kind.value_counts()
    assert kinds[NULL] >= 20 and kinds[PLANTED] >= 10
    null = committed.set_index(["claim", "kind"]).loc[("elicits", NULL)]
    assert null.rate <= plan.alpha, f"false 'reproduces' rate {null.rate:.2f} above alpha"
