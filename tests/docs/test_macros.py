"""The documentation's build-time data functions (docs/_hooks/macros.py) and the rule that results
pages state no number by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def load(name: str):
    """A module of docs/_hooks by its path (they are mkdocs hooks, not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", ROOT / "docs" / "_hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def macros(tmp_path, monkeypatch):
    module = load("macros")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    module._read.cache_clear()
    pd.DataFrame(
        {
            "task": ["a", "a", "a", "b", "b", "b"],
            "setting": ["original", "masked", "instructed"] * 2,
            "accuracy": [0.0, 0.71, 0.52, 0.1, 0.05, 0.3],
            "answer_nll": [7.0, 2.2, 4.1, 6.0, 2.0, 1.5],
            "p": [float("nan"), 8.5e-22, float("nan"), float("nan"), 0.00024, float("nan")],
            "labels": ['{"x": 3, "y": 9}'] * 6,
        }
    ).to_csv(tmp_path / "eval.csv", index=False)
    pd.DataFrame(
        {
            "example": [0, 1, 2, 3, 0, 1, 2, 3],
            "setting": ["masked"] * 4 + ["original"] * 4,
            "input": ["farm", "cat", "dog", "sun"] * 2,
            "answer": ["mraf", "tac", "god", "nus"] * 2,
            "output": ["mraf", "the tac", "dog", "nus!", "farm", "cat", "dog", "sun"],
            "correct": [True, True, False, True, False, False, False, False],
        }
    ).to_csv(tmp_path / "generations.csv", index=False)
    (tmp_path / "config.json").write_text(json.dumps({"steps": 6250, "lr": 0.01}))
    return module


def test_a_value_comes_from_exactly_one_row(macros):
    assert macros.value("eval.csv", "accuracy", task="a", setting="masked") == "0.71"
    assert macros.csv("eval.csv", column="accuracy", task="b", setting="instructed") == "0.30"
    assert macros.value("eval.csv", "p", ".2g", task="a", setting="masked") == "8.5e-22"
    assert macros.value("eval.csv", "p", ".2g", task="b", setting="masked") == "0.00024"
    assert macros.value("eval.csv", "p", ".2g", task="a", setting="original") == "n/a"  # NaN
    with pytest.raises(macros.DataError, match="2 rows match"):
        macros.value("eval.csv", "accuracy", setting="masked")
    with pytest.raises(macros.DataError, match="0 rows match"):
        macros.value("eval.csv", "accuracy", task="c", setting="masked")
    with pytest.raises(macros.DataError, match="no column 'acc'"):
        macros.value("eval.csv", "acc", task="a", setting="masked")
    with pytest.raises(macros.DataError, match="no such file"):
        macros.value("missing.csv", "accuracy")


def test_filters_counts_and_aggregates(macros):
    assert macros.count("generations.csv", setting="masked", correct=True) == 3
    assert macros.count("generations.csv", output__startswith="the") == 1
    assert (
        macros.count("generations.csv", output__eq_col="input") == 5
    )  # the original echoes every input, "dog" once more
    assert macros.count("generations.csv", output__contains_col="answer", correct=False) == 0
    assert macros.count("generations.csv", query="output.str.len() > 3") == 4
    assert macros.share("generations.csv", {"setting": "masked"}, output__contains_col="answer") == "0.75"
    assert macros.agg("eval.csv", "accuracy", "max", setting="original") == "0.10"
    assert macros.agg("eval.csv", "answer_nll", "mean", ".1f", task="a") == "4.4"
    assert macros.n_where("eval.csv", "accuracy", "masked", "original") == 1  # a: 0.71 > 0; b: 0.05 < 0.1
    assert macros.n_where("eval.csv", "answer_nll", "masked", "instructed", op="<") == 1
    assert macros.n_groups("eval.csv") == 2
    assert macros.first("eval.csv", "setting", query="accuracy == accuracy.max()") == "masked"
    assert macros.argmin_by("eval.csv", "answer_nll", "setting") == ["masked", "instructed"]
    assert macros.cell_json("eval.csv", "labels", "y", task="a", setting="masked") == "9"
    assert macros.top_label("eval.csv", "labels", task="a", setting="masked") == "y"
    assert macros.json_value("config.json", "steps", fmt=",d") == "6 250"
    with pytest.raises(macros.DataError, match="unknown filter"):
        macros.count("eval.csv", accuracy__near=0.5)


def test_paired_scorings(macros):
    paired = macros.paired("generations.csv", {"setting": "masked"}, None, {"setting": "original"}, compare="output")
    assert (paired["only_a"], paired["only_b"], paired["both"], paired["n"], paired["changed"]) == (3, 0, 0, 4, 3)
    assert paired["p"] == pytest.approx(0.25)  # exact two-sided binomial test of 3 discordant pairs


def test_tables_render_the_file(macros):
    table = macros.table(
        "eval.csv",
        columns={"task": "task", "masked": "{accuracy:.2f} (loss {answer_nll:.1f})", "p": "{p:.2g}"},
        setting="masked",
    )
    assert table.splitlines() == [
        "| task | masked | p |",
        "|---|---|---|",
        "| a | 0.71 (loss 2.2) | 8.5e-22 |",
        "| b | 0.05 (loss 2.0) | 0.00024 |",
    ]
    pivot = macros.pivot(
        "eval.csv", index="task", columns="setting", cell="{accuracy:.2f}", cols=["original", "masked"]
    )
    assert pivot.splitlines()[2:] == ["| a | 0.00 | 0.71 |", "| b | 0.10 | 0.05 |"]
    grouped = macros.group_table("eval.csv", "setting", {"mean accuracy": "accuracy:.3f"})
    assert "| masked | 0.380 |" in grouped.splitlines()
    ordered = macros.table("eval.csv", columns=["task"], order={"task": ["b", "a"]}, setting="masked")
    assert ordered.splitlines()[2:] == ["| b |", "| a |"]


def test_number_formats():
    macros = load("macros")
    assert macros.format_number(6250, ",d") == "6 250"
    assert macros.format_number(2.1e-05, ".0e") == "2e-5"
    assert macros.format_number(0.98, ".0%") == "98%"
    assert macros.format_number(float("nan")) == "n/a"
    assert macros.format_number("10 28", ".2f") == "10 28"  # text stays text


def test_hand_typed_numbers_are_found_outside_macros_code_and_names():
    macros = load("macros")
    clean = (
        '---\nrender_macros: true\n---\n{% set X = 3 %}\nThe mask scores {{ value("f.csv", "a", t=1) }} on '
        "Table 5 and Fig. 2 of App. C.3.2 with SmolLM2-135M and seed 1 (95% intervals, `--steps 150`):\n"
        '```bash\nrun --steps 300\n```\n1. a list item\n"Sony\'s PlayStation 3" is an output.\n'
    )
    assert macros.hand_typed_numbers(clean) == []
    assert macros.hand_typed_numbers("The mask scores 0.71 on antonym.") == ["The mask scores 0.71 on antonym."]
    assert len(macros.hand_typed_numbers("after 85 removals, 12 heads")) == 2


@pytest.mark.parametrize("page", sorted(RESULTS.glob("*.md")), ids=lambda p: p.name)
def test_results_pages_state_no_number_by_hand(page):
    """Every digit a results page states comes from a macro call (read from the committed data when
    the site is built), or is code, or part of a name (Table 5, SmolLM2, seed 1)."""
    macros = load("macros")
    text = page.read_text(encoding="utf-8")
    if page.name != "index.md":
        assert text.startswith("---\nrender_macros: true\n---\n"), "a results page renders its macros"
    assert macros.hand_typed_numbers(text) == []


def test_the_cli_reference_is_the_help_text():
    """The generated page holds every command's --help exactly as the command line prints it."""
    reference = load("cli_reference")
    texts = reference.help_texts(width=100)
    assert {"headsup", "headsup train", "headsup sweep", "headsup organism train"} <= set(texts)
    page = reference.page(width=100)
    for command in ("headsup sweep", "headsup organism train"):
        printed = subprocess.run(
            [sys.executable, "-m", "headsup_lens", *command.split()[1:], "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**__import__("os").environ, "COLUMNS": "100"},
            check=True,
        ).stdout
        assert printed.rstrip() == texts[command].rstrip()
        assert f"```text\n{printed.rstrip()}\n```" in page


def test_influence_reorder_follows_the_weight_sweep(macros):
    """A weight sweep whose target jumps to rank 1 at step 3: the influence order puts that head first
    and pushes the head whose removal cost the target a place behind the heads with no rise."""

    def ranks(path, values):
        pd.DataFrame(
            {
                "step": list(range(len(values))),
                "label": ["target 'm'"] * len(values),
                "rank": values,
                "kind": ["target"] * len(values),
            }
        ).to_csv(macros.ROOT / path, index=False)

    ranks("weight.csv", [9, 10, 8, 1, 1, 2, 1])  # rises: -1, 2, 7, 0, -1, 1
    ranks("influence.csv", [9, 4, 3, 2, 2, 1, 1])
    found = macros.influence_reorder("weight.csv", "influence.csv", k=6)
    # by rise, ties in sweep order: step 3 (7), step 2 (2), step 6 (1), step 4 (0), steps 1, 5 (-1)
    assert found["steps"] == [3, 2, 6, 4, 1]
    assert found["rises"] == [-1, 2, 7]
    assert (found["switch_weight"], found["switch_influence"], found["first_rank"]) == (3, 5, 4)
    assert (found["n_zero"], found["n_negative"], found["n_zero_after"]) == (1, 2, 1)
    assert found["all_removed"] == 5  # step 1 comes fifth
    assert found["n_after_switch_before"] == 2  # steps 6 and 4
    assert found["n_first_by_switch"] == 3
    with pytest.raises(macros.DataError, match="never"):
        ranks("flat.csv", [9, 9, 9, 9, 9, 9, 9])
        macros.influence_reorder("weight.csv", "flat.csv", k=6)
