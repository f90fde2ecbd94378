"""A verdict per claim (`smollm2.py verdicts`): each rule turns with the numbers it reads, a missing
table is "not run", and the committed verdicts are the rules applied to the committed tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from headsup_lens.reproduce._verdicts import CLAIMS, DOES_NOT, NOT_RUN, REPRODUCES, UNTESTABLE, claim_verdicts

FIGURES = Path(__file__).resolve().parents[2] / "figures"


def settings(masked: tuple[float, float, float], instructed: float = 0.1) -> pd.DataFrame:
    """A settings table: strict (value, low, high) per setting; the original and random mask at 0 [0, 0.04]."""
    rows = {
        "original": (0.0, 0.0, 0.04),
        "instructed": (instructed, max(instructed - 0.05, 0), instructed + 0.07),
        "masked": masked,
        "random mask": (0.0, 0.0, 0.04),
    }
    return pd.DataFrame(
        [{"setting": s, "strict": v, "strict_low": lo, "strict_high": hi} for s, (v, lo, hi) in rows.items()]
    )


def write(folder: Path, masked=(0.3, 0.22, 0.4), instructed=0.1, switch=(12, None), cosines=(0.9, 0.8), best=0.3):
    folder.mkdir(exist_ok=True)
    settings(masked, instructed).to_csv(folder / "tables12_evaluation_t.csv", index=False)
    pd.DataFrame({"order": ["weight", "random"], "target_switch_step": list(switch)}).to_csv(
        folder / "fig2_summary_t.csv", index=False
    )
    rows = []
    for layer in (0, 5):
        for comparison, cosine in zip(("masked vs instructed", "original vs instructed"), cosines):
            rows += [
                {"layer": layer, "comparison": comparison, "block_out": c, "example": i}
                for i, c in enumerate([cosine] * 2)
            ]
    pd.DataFrame(rows).to_csv(folder / "fig4_similarity_t.csv", index=False)
    alphas = [i / 10 for i in range(11)]
    pd.DataFrame({"alpha": alphas, "loss": [2 + (a - best) ** 2 for a in alphas]}).to_csv(
        folder / "fig6_alpha_grid_t.csv", index=False
    )


def verdicts(folder: Path) -> dict[str, str]:
    return claim_verdicts(folder, ["t"]).set_index("claim").verdict.to_dict()


def test_every_claim_reproduces_on_tables_that_show_it(tmp_path):
    write(tmp_path / "a")
    table = claim_verdicts(tmp_path / "a", ["t"])
    assert list(table.claim) == list(CLAIMS) and set(table.verdict) == {REPRODUCES}
    evidence = table.set_index("claim").evidence
    assert (
        evidence["elicits"]
        == "strict: masked 0.30 [0.22, 0.40], original 0.00 [0.00, 0.04], instructed 0.10 [0.05, 0.17]"
    )
    assert evidence["fig2"] == "answer top-1: weight order after 12 removals, random order never"
    assert evidence["fig6"] == "instructed loss 2.490 at α 1.0, lowest 2.000 at α 0.3"


@pytest.mark.parametrize(
    ("change", "claim"),
    [
        ({"masked": (0.03, 0.01, 0.08)}, "elicits"),  # overlaps the original's interval
        ({"masked": (0.3, 0.22, 0.4), "instructed": 0.6}, "elicits"),  # clearly below the instructed model
        ({"switch": (None, None)}, "fig2"),  # no switch in weight order
        ({"switch": (12, 30)}, "fig2"),  # random order switches too
        ({"cosines": (0.8, 0.9)}, "fig4"),
        ({"best": 1.0}, "fig6"),
    ],
)
def test_each_rule_turns_with_its_numbers(change, claim, tmp_path):
    write(tmp_path / "a", **change)
    found = verdicts(tmp_path / "a")
    assert found[claim] == DOES_NOT
    if claim == "elicits":  # how the mask does the task is untestable where it does not do it
        assert found["random"] == found["fig2"] == UNTESTABLE
    else:
        assert {c: v for c, v in found.items() if c != claim} == dict.fromkeys(set(CLAIMS) - {claim}, REPRODUCES)


def test_the_random_control_fails_when_the_random_mask_does_as_well(tmp_path):
    write(tmp_path / "a")
    table = pd.read_csv(tmp_path / "a" / "tables12_evaluation_t.csv")
    table.loc[table.setting == "random mask", ["strict", "strict_low", "strict_high"]] = (0.25, 0.17, 0.35)
    table.to_csv(tmp_path / "a" / "tables12_evaluation_t.csv", index=False)
    assert verdicts(tmp_path / "a")["random"] == DOES_NOT


def test_a_missing_table_is_not_run(tmp_path):
    write(tmp_path / "a")
    (tmp_path / "a" / "fig4_similarity_t.csv").unlink()
    row = claim_verdicts(tmp_path / "a", ["t"]).set_index("claim").loc["fig4"]
    assert row.verdict == NOT_RUN and row.evidence == "no fig4_similarity_t.csv"


@pytest.mark.parametrize("model", ["smollm2", "gemma3-270m"])
def test_the_committed_verdicts_are_the_rules_on_the_committed_tables(model):
    committed = pd.read_csv(FIGURES / model / "verdicts.csv")
    again = claim_verdicts(FIGURES / model, list(dict.fromkeys(committed.task)))
    pd.testing.assert_frame_equal(again, committed, check_dtype=False)
