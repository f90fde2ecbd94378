"""The bake comparison (`experiments/bake_smollm2.py`'s steps) on a tiny random Llama: the baked folder
gives the gated model's greedy outputs in plain transformers and back in the toolkit."""

from __future__ import annotations

import pandas as pd
import torch

from headsup_lens import fingerprint
from headsup_lens.data import load_task
from headsup_lens.masks import HeadMask
from headsup_lens.reproduce import ExperimentOptions, open_experiment
from headsup_lens.reproduce._bake import agreement, bake_comparison, logit_gap

from ..conftest import build_llama_dir


def test_the_baked_folder_answers_as_the_gated_model(tmp_path):
    model_dir = build_llama_dir(tmp_path / "tiny")
    options = ExperimentOptions(model=str(model_dir), out=str(tmp_path / "out"), png=False)
    with open_experiment("bake_smollm2", options, tmp_path) as xp:
        values = torch.ones(xp.model.cfg.n_layers, xp.model.cfg.n_heads)
        values[0, :4] = 0  # half the heads of the first layer removed
        mask = HeadMask(values, model=fingerprint(xp.model))
        bakes, summary = bake_comparison(xp, mask, load_task("organism/antonym"), work=tmp_path / "work", limit=4)
    folder = tmp_path / "out" / "tiny" / "bake"
    assert list(bakes.output) == ["hf"]  # not converted from a GGUF file: no GGUF bake
    outputs = pd.read_csv(folder / "outputs_organism__antonym.csv", keep_default_na=False)
    assert len(outputs) == 4
    assert list(outputs["baked hf (transformers)"]) == list(outputs["gated (toolkit)"])
    assert list(outputs["baked hf (toolkit)"]) == list(outputs["gated (toolkit)"])
    rates = summary.set_index("comparison").rate
    assert rates["baked hf (transformers) vs gated (toolkit)"] == 1.0
    pd.testing.assert_frame_equal(pd.read_csv(folder / "summary_organism__antonym.csv"), summary, check_dtype=False)
    logits = pd.read_csv(folder / "logits_organism__antonym.csv").set_index("comparison")
    baked, control = (
        logits.loc["baked hf (transformers) vs gated (toolkit)"],
        logits.loc["ungated (toolkit) vs gated (toolkit)"],
    )
    assert baked.prompts == 4 and baked.positions == control.positions > 4
    assert baked.max_abs_diff <= 1e-4 < control.max_abs_diff  # one process computes both sides
    assert baked.same_top1 == baked.positions


def test_logit_gap_finds_the_largest_difference_and_counts_equal_top_tokens():
    table = torch.tensor([[[0.0, 1.0], [2.0, 0.0]]])  # [1, pos 2, vocab 2]; the prompt ids index the rows
    moved = torch.tensor([[[0.0, 1.5], [0.0, 2.0]]])

    def pick(source):
        return lambda ids: source[:, : ids.shape[1]]

    gap = logit_gap(pick(table), pick(moved), [[5, 6], [7]])
    assert gap == {"prompts": 2, "positions": 3, "max_abs_diff": 2.0, "same_top1": 2}


def test_agreement_counts_equal_outputs_and_accuracy():
    table = pd.DataFrame({"a": ["x", "y", "z"], "b": ["x", "q", "z"], "correct: a": [True, False, True]})
    summary = agreement(table, [("a", "b")], ["a"]).set_index("comparison")
    assert summary.loc["a vs b", "equal outputs"] == 2 and summary.loc["a vs b", "rate"] == 0.667
    assert summary.loc["accuracy: a", "rate"] == 0.667 and pd.isna(summary.loc["accuracy: a", "equal outputs"])
