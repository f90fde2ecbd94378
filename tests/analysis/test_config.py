"""One frozen config per analysis: checked once when built, taken by the functions, keywords on top."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from headsup_lens import HeadMask, logit_lens, removal_sweep
from headsup_lens.analysis import (
    AttentionConfig,
    LensConfig,
    PathwayConfig,
    SimilarityConfig,
    SweepConfig,
    attention_on_target,
    layer_similarity,
    setting_similarity,
)
from headsup_lens.analysis._config import configured

from ..conftest import random_mask

CONFIGS = (SweepConfig, LensConfig, SimilarityConfig, AttentionConfig, PathwayConfig)


@pytest.mark.parametrize("cls", CONFIGS)
def test_every_config_is_frozen_documented_and_replaceable(cls):
    config = cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.gate = "query"  # type: ignore[misc]
    assert config.replace() == config
    from headsup_lens.options import field_docs

    docs = field_docs(cls)
    assert {f.name for f in dataclasses.fields(cls)} <= set(docs), cls


@pytest.mark.parametrize(
    ("cls", "fields", "message"),
    [
        (SweepConfig, {"top_k": -1}, "top_k must be >= 0, got -1"),
        (SweepConfig, {"max_new_tokens": -1}, "max_new_tokens must be >= 0, got -1"),
        (SweepConfig, {"batch_size": 0}, "batch_size must be >= 1, got 0"),
        (SweepConfig, {"memory_gb": 0.0}, "memory_gb must lie in (0, inf)"),
        (SweepConfig, {"gate": "query", "alpha": 0.5}, "the query gate takes alpha=0"),
        (LensConfig, {"k": 0}, "k must be >= 1, got 0"),
        (LensConfig, {"alpha": 1.5}, "alpha must lie in [0, 1], got 1.5"),
        (LensConfig, {"streams": ("mlp",)}, "streams must be drawn from"),
        (SimilarityConfig, {"instruction": "no placeholder"}, "instruction must be a template with {input}"),
        (AttentionConfig, {"settings": ("swapped",)}, "settings must be drawn from"),
        (AttentionConfig, {"batch_size": 0}, "batch_size must be >= 1, got 0"),
        (PathwayConfig, {"n_random": 0}, "n_random must be >= 1, got 0"),
    ],
)
def test_a_field_out_of_range_is_refused_when_built_naming_it(cls, fields, message):
    with pytest.raises(ValueError) as error:
        cls(**fields)
    assert message in str(error.value)


def test_top_k_zero_tracks_the_targets_only(llama):
    """`--top-k 0` and `removal_sweep(top_k=0)` agree: 0 is accepted, and the sweep tracks its targets only."""
    order = [(0, 0), (1, 1)]
    sweep = removal_sweep(llama, "cat", order, top_k=0, target_tokens=[5], max_new_tokens=1)
    assert sweep.tokens.kind.tolist() == ["target"]
    assert SweepConfig(top_k=0).top_k == 0


def test_functions_take_the_config_and_keywords_on_top(llama):
    order = [(0, 0), (1, 1)]
    by_config = removal_sweep(llama, "cat", order, SweepConfig(top_k=2, max_new_tokens=1))
    by_keywords = removal_sweep(llama, "cat", order, top_k=2, max_new_tokens=1)
    on_top = removal_sweep(llama, "cat", order, SweepConfig(top_k=4, max_new_tokens=1), top_k=2)
    for sweep in (by_keywords, on_top):
        assert sweep.ranks.equals(by_config.ranks) and sweep.generations == by_config.generations
    assert by_config.metadata["top_k"] == 2
    mask = HeadMask(random_mask(llama, seed=1))
    lens = logit_lens(llama, "cat", mask=mask, config=LensConfig(k=3, streams=("resid",)))
    assert lens.table.equals(logit_lens(llama, "cat", 3, mask, streams=["resid"]).table)
    with pytest.raises(TypeError, match=r"removal_sweep\(\) got an unexpected keyword argument 'top'"):
        removal_sweep(llama, "cat", order, top=2)
    with pytest.raises(TypeError, match="argument config=SweepConfig"):
        logit_lens(llama, "cat", config=SweepConfig())  # type: ignore[arg-type]


def test_setting_similarity_is_the_cli_comparisons(llama):
    mask = HeadMask(random_mask(llama, seed=2))
    tables = setting_similarity(llama, "cat", mask, instruction="Say the opposite: {input}")
    assert list(tables) == ["original vs instructed", "masked vs instructed", "masked vs masked+instructed"]
    assert tables["original vs instructed"].equals(layer_similarity(llama, "cat", "Say the opposite: cat"))
    assert list(setting_similarity(llama, "cat", config=SimilarityConfig(instruction="{input}!"))) == [
        "original vs instructed"
    ]
    with pytest.raises(ValueError, match="needs an instruction template"):
        setting_similarity(llama, "cat")


def test_attention_on_target_reads_its_config(llama):
    pairs = [("cat, dog, red", "dog"), ("sun, moon, cow", "cow")]
    mask = torch.ones(llama.cfg.n_layers, llama.cfg.n_heads)
    config = AttentionConfig(settings=("original", "masked"), batch_size=1)
    assert attention_on_target(llama, pairs, mask, config).table.setting.tolist() == ["original", "masked"]


def test_configured_reads_lists_as_tuples_and_refuses_other_configs():
    assert configured(LensConfig, None, {"streams": ["embed"]}, "f").streams == ("embed",)
    assert configured(PathwayConfig, PathwayConfig(n_random=2), {}, "f").n_random == 2
