"""The README and the results index name the tasks each model was run on (read from each model's
verdicts), and say nothing that only held for an earlier run ("antonym only", "one task")."""

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"README": ROOT / "README.md", "results index": ROOT / "docs" / "results" / "index.md"}
STALE = [r"antonym only", r"\bone task\b", r"echo the word or start lists"]


def ran(model: str) -> list[str]:
    return list(dict.fromkeys(pd.read_csv(ROOT / "figures" / model / "verdicts.csv").task))


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("model", ["smollm2", "gemma3-270m"])
def test_the_page_names_every_task_the_model_ran(page, model):
    text = PAGES[page].read_text(encoding="utf-8")
    missing = [task for task in ran(model) if task not in text]
    assert not missing, f"{page} does not name {model}'s tasks {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_the_page_says_nothing_stale(page):
    text = PAGES[page].read_text(encoding="utf-8")
    found = [pattern for pattern in STALE if re.search(pattern, text)]
    assert not found, f"{page}: {found}"
