"""The translation stages (`experiments/translation.py`'s steps): the scan's scores of the committed
SmolLM2 generations, and scan, train, removal sweeps and Table 8 on a tiny random model (XNLI and IWSLT data)."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import headsup_lens as hl
from headsup_lens.evaluation import paper_rouge_l
from headsup_lens.reproduce import ExperimentOptions, open_experiment
from headsup_lens.reproduce._translation import (
    ECHO,
    fig2_sweeps,
    scan_summary,
    scan_translation,
    table1_rows,
    table8_rows,
    train_translation_masks,
    translation_mask_name,
)

from ..conftest import build_qwen2_dir

FIGURES = Path(__file__).resolve().parents[2] / "figures" / "smollm2" / "translation"


def test_scan_summary_reproduces_the_committed_smollm2_scan():
    """Every score of the committed scan but the one that needs the model's tokenizer, from its generations."""
    stored = pd.read_csv(FIGURES / "scan.csv").drop(columns="rouge_l_model_tokenizer")
    again = scan_summary(pd.read_csv(FIGURES / "scan_generations.csv", keep_default_na=False))
    again = pd.read_csv(io.StringIO(again.to_csv(index=False)))  # as written
    # Floats to a relative 1e-9: BLEU and ROUGE-L take logs and means whose last bits may round
    # otherwise on another CPU or release; counts and names exactly.
    pd.testing.assert_frame_equal(again, stored, check_exact=False, rtol=1e-9, atol=0.0)
    assert len(stored) == 6 and stored.target_language_share.between(0, 1).all()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    # byte-level BPE: encodes Chinese
    return build_qwen2_dir(tmp_path_factory.mktemp("model") / "tiny", max_position_embeddings=2048)


def stage(model_dir: Path, out: Path, data: Path, **changes):
    options = ExperimentOptions(
        model=str(model_dir), out=str(out), png=False, steps=2, batch_size=2, schedule="fast", data_dir=str(data)
    )
    return open_experiment("translation", replace(options, **changes), out)


def test_scan_train_sweeps_and_table8(model_dir, tmp_path, shared_data_dir):
    out, folder = tmp_path / "out", tmp_path / "out" / "tiny" / "translation"
    with stage(model_dir, out, shared_data_dir) as xp:
        scan_translation(xp, ["en-zh"], n=3, batch_size=50, data_dir=str(shared_data_dir))
        assert len(pd.read_csv(folder / "scan_generations.csv")) == 3  # kept at once: a rerun resumes from it
    scan = pd.read_csv(folder / "scan.csv")
    assert list(scan.pair) == ["en-zh"] and {"target_language_share", "rouge_l", "bleu"} <= set(scan.columns)

    with stage(model_dir, out, shared_data_dir) as xp:
        assert fig2_sweeps(xp, "en-zh", new_tokens=2, title="tiny", data_dir=str(shared_data_dir)) is None  # no mask
        train_translation_masks(xp, ["en-zh"], xp.train_config(), tmp_path / "runs", data_dir=str(shared_data_dir))
    assert (out / "tiny" / translation_mask_name("en-zh")).is_file()
    assert (folder / "masks" / "translation_en-zh_history.csv").is_file()

    with stage(model_dir, out, shared_data_dir) as xp:
        fig2_sweeps(xp, "en-zh", new_tokens=2, title="tiny", data_dir=str(shared_data_dir))
        table8 = table8_rows(xp, "en-zh", n=4, alpha=None, batch_size=50, data_dir=str(shared_data_dir))
    summary = pd.read_csv(folder / "fig2_summary_en-zh.csv")
    assert list(summary.order) == ["weight", "influence", "random"]
    generations = pd.read_csv(folder / "fig2_weight_en-zh_generations.csv")
    assert list(generations.step) == list(range(len(generations))) and "language" in generations  # every step
    assert (folder / "fig2_weight_en-zh.html").is_file()
    assert list(table8.setting) == ["instructed", "instructed + scaled mask (alpha 0.1)", ECHO]  # the paper's alpha
    assert (table8.n == 4).all() and table8.target_language_share.between(0, 1).all()
    pd.testing.assert_frame_equal(pd.read_csv(folder / "table8_en-zh.csv"), table8.reset_index(drop=True))

    with stage(model_dir, out, shared_data_dir) as xp:  # stored sweeps are not run again
        assert fig2_sweeps(xp, "en-zh", new_tokens=2, title="tiny", data_dir=str(shared_data_dir)) is None
    assert len(pd.read_csv(folder / "fig2_summary_en-zh.csv")) == 3
    assert set(pd.read_csv(folder / "times.csv").stage) == {"scan", "train", "analyze"}


@pytest.mark.slow  # minutes on a loaded CPU: 50-token generations of 100 held-out pairs per setting
def test_table1_rows_with_and_without_a_stored_mask(model_dir, tmp_path, shared_data_dir):
    out, folder = tmp_path / "out", tmp_path / "out" / "tiny" / "translation"
    with stage(model_dir, out, shared_data_dir) as xp:  # no mask yet: the two baselines
        first = table1_rows(xp, "en-zh", alpha=0.25, batch_size=50, data_dir=str(shared_data_dir))
    assert list(first.setting) == ["original", "instructed", ECHO]
    with stage(model_dir, out, shared_data_dir) as xp:
        train_translation_masks(xp, ["en-zh"], xp.train_config(), tmp_path / "runs", data_dir=str(shared_data_dir))
    with stage(model_dir, out, shared_data_dir) as xp:
        table1_rows(xp, "en-zh", alpha=0.25, batch_size=50, data_dir=str(shared_data_dir))
    table = pd.read_csv(folder / "table1_en-zh.csv")
    assert list(table.setting) == [
        "original",
        "instructed",
        "masked",
        "random mask",
        "instructed + scaled mask (alpha 0.25)",
        ECHO,
    ]
    assert (table.n == 100).all() and table.target_language_share.between(0, 1).all()
    task = hl.load_task("translation/en-zh", shared_data_dir)  # the control scores the sources themselves
    sources, references = zip(*task.eval_pairs)
    assert table.set_index("setting").loc[ECHO, "rouge_l"] == pytest.approx(
        paper_rouge_l(list(sources), list(references))
    )
