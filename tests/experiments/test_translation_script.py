"""experiments/translation.py runs its stages end to end on a tiny random model (XNLI and IWSLT data)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

import headsup_lens as hl

from ..conftest import build_qwen2_dir

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
ECHO = "echo baseline (source as output)"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import translation

        yield translation
    finally:
        sys.path.remove(str(EXPERIMENTS))


@pytest.mark.slow  # minutes on a loaded CPU: 50-token generations of 100 held-out pairs per setting
def test_scan_train_analyze(script, tmp_path, shared_data_dir):
    model = str(build_qwen2_dir(tmp_path / "model", max_position_embeddings=2048))  # byte-level BPE: encodes Chinese
    out = tmp_path / "figures"
    common = [
        "--model",
        model,
        "--out",
        str(out),
        "--runs",
        str(tmp_path / "runs"),
        "--no-png",
        "--eval-batch-size",
        "50",
        "--data-dir",
        str(shared_data_dir),
    ]
    script.main(["scan", "--pairs", "en-zh", "--scan-n", "3", *common])
    scan = pd.read_csv(out / "scan.csv")
    assert list(scan.pair) == ["en-zh"] and {"target_language_share", "rouge_l", "bleu"} <= set(scan.columns)

    script.main(["analyze", "--pairs", "en-zh", "--parts", "table1", *common])  # no mask yet: the two baselines
    assert list(pd.read_csv(out / "table1_en-zh.csv").setting) == ["original", "instructed", ECHO]

    script.main(["train", "--pairs", "en-zh", "--steps", "2", "--batch-size", "2", *common])
    assert (out / "masks" / "translation_en-zh.safetensors").exists()
    script.main(["analyze", "--pairs", "en-zh", "--new-tokens", "2", "--iwslt-n", "4", *common])
    table = pd.read_csv(out / "table1_en-zh.csv")
    assert list(table.setting) == [
        "original",
        "instructed",
        "masked",
        "random mask",
        "instructed + scaled mask (alpha 0.25)",
        ECHO,
    ]
    assert (table.n == 100).all() and table.target_language_share.between(0, 1).all()
    from headsup_lens.evaluation import paper_rouge_l

    task = hl.load_task("translation/en-zh", shared_data_dir)  # the control scores the sources themselves
    sources, references = zip(*task.eval_pairs)
    assert table.set_index("setting").loc[ECHO, "rouge_l"] == pytest.approx(
        paper_rouge_l(list(sources), list(references))
    )
    summary = pd.read_csv(out / "fig2_summary_en-zh.csv")
    assert list(summary.order) == ["weight", "influence", "random"]
    generations = pd.read_csv(out / "fig2_weight_en-zh_generations.csv")
    assert list(generations.step) == list(range(len(generations))) and "language" in generations  # every step
    table8 = pd.read_csv(out / "table8_en-zh.csv")
    assert (
        list(table8.setting) == ["instructed", "instructed + scaled mask (alpha 0.1)", ECHO] and (table8.n == 4).all()
    )
    assert table8.target_language_share.between(0, 1).all()
