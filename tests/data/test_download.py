"""`headsup download-data` argument handling (no network)."""

from __future__ import annotations

import pytest

from headsup_lens.cli import main
from headsup_lens.cli._train import download_plan
from headsup_lens.data import FV_TASKS


def test_plan_covers_the_shared_layout():
    plan = download_plan(["function_vectors", "xnli", "iwslt2017"], ["en", "zh"])
    paths = [p for _, p in plan]
    assert len([p for p in paths if p.startswith("function_vectors/abstractive/")]) == len(FV_TASKS)
    assert "function_vectors/fewshot/hybrid.json" in paths
    assert {"xnli/dev-en.tsv", "xnli/test-zh.tsv", "iwslt2017/en-zh-test.parquet"} <= set(paths)
    assert all(url.startswith("https://") and url.endswith(path.rsplit("/", 1)[-1]) for url, path in plan)


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    assert (
        main(["download-data", "--out", str(tmp_path), "--only", "xnli", "--languages", "fr", "--dry-run", "true"]) == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].endswith(str(tmp_path / "xnli" / "dev-fr.tsv"))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "argv, message", [(["--only", "wiki"], "unknown dataset"), (["--languages", "xx"], "unknown XNLI")]
)
def test_bad_arguments(tmp_path, capsys, argv, message):
    assert main(["download-data", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err and not any(tmp_path.iterdir())
