import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch

from headsup_lens import activation_pattern
from headsup_lens.analysis import (
    coefficient_of_variation,
    example_patterns,
    fit_pattern_change,
    gini,
    grouping_test,
    head_overlap,
    kurtosis,
    pattern_correlation,
    pattern_statistics,
    pattern_trajectory,
    rank_by_pattern,
    shuffled_fit_r2,
    top_heads,
)
from headsup_lens.data import tokenize_pairs

from ..conftest import random_mask

PAIRS = [("cat", "dog"), ("apple pie", "pear"), ("sun", "moon and stars"), ("a", "b")]


def manual_pattern(model, pairs, mask=None, activation="pattern", detached=False):
    """Brute force, one example and one layer at a time, unpadded: full logits, the example's mean
    answer cross-entropy and the gradient of a zero added at that layer's activation alone (the
    total derivative dL/dA). `detached=True` instead swaps every layer's activation for a detached
    leaf, which drops the paths through later layers' attention (kept to show the difference)."""
    from headsup_lens.gates import value_gate_hooks

    hook_name = {"pattern": "attn.hook_pattern", "z": "attn.hook_z"}[activation]
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64)
    for pair in pairs:
        batch = tokenize_pairs(model, [pair])
        for layer in range(model.cfg.n_layers):
            seen = {}

            def probe(value, hook, layer=layer):
                if detached:
                    seen[hook.layer()] = value.detach().requires_grad_(True)
                    return seen[hook.layer()]
                if hook.layer() != layer:
                    return value
                seen["value"], seen["probe"] = value.detach(), torch.zeros_like(value, requires_grad=True)
                return value + seen["probe"]

            hooks = [(f"blocks.{l}.{hook_name}", probe) for l in range(model.cfg.n_layers)]
            if mask is not None:
                hooks = value_gate_hooks(model, mask) + hooks
            with torch.enable_grad(), model.hooks(fwd_hooks=hooks):
                logits = model(batch.input_ids)
                loss = torch.nn.functional.cross_entropy(logits[0, :-1], batch.labels[0, 1:], ignore_index=-100)
                target, value = (seen[layer], seen[layer].detach()) if detached else (seen["probe"], seen["value"])
                (grad,) = torch.autograd.grad(loss, target)
            product = (value * grad).abs()[0]
            total[layer] += (product.sum((-1, -2)) if activation == "pattern" else product.sum((0, 2))).double()
    return (total / len(pairs)).float()


def test_activation_pattern_equals_the_brute_force_total_derivative(any_model):
    expected = manual_pattern(any_model, PAIRS)
    for batch_size in (1, 3):
        pattern = activation_pattern(any_model, PAIRS, batch_size=batch_size)
        assert pattern.shape == (any_model.cfg.n_layers, any_model.cfg.n_heads)
        assert torch.allclose(pattern, expected, rtol=1e-4, atol=1e-7)
    assert (expected > 0).all()


def test_example_patterns_are_each_examples_own_and_average_to_the_pattern(llama):
    per_example = example_patterns(llama, PAIRS, batch_size=3)
    assert per_example.shape == (len(PAIRS), llama.cfg.n_layers, llama.cfg.n_heads)
    assert per_example.dtype == torch.float64
    for i, pair in enumerate(PAIRS):  # a padded batch gives each example the pattern it has alone
        assert torch.allclose(per_example[i].float(), manual_pattern(llama, [pair]), rtol=1e-4, atol=1e-7)
    assert torch.allclose(per_example.mean(0).float(), activation_pattern(llama, PAIRS), rtol=1e-6, atol=1e-9)


def test_detached_patterns_would_miss_the_paths_through_later_layers(llama):
    total = manual_pattern(llama, PAIRS)
    detached = manual_pattern(llama, PAIRS, detached=True)
    assert torch.allclose(total[-1], detached[-1], rtol=1e-4)  # the last layer has no later attention
    assert not torch.allclose(total[0], detached[0], rtol=1e-4)  # beyond the tolerance the tests use


def test_z_variant_equals_its_brute_force(llama):
    expected = manual_pattern(llama, PAIRS, activation="z")
    assert torch.allclose(
        activation_pattern(llama, PAIRS, activation="z", batch_size=2), expected, rtol=1e-4, atol=1e-7
    )


def test_activation_pattern_under_a_mask(llama):
    mask = random_mask(llama, seed=6)
    masked = activation_pattern(llama, tokenize_pairs(llama, PAIRS), mask=mask, batch_size=4)
    assert torch.allclose(masked, manual_pattern(llama, PAIRS, mask=mask), rtol=1e-4, atol=1e-7)
    # A removed head's output is zeroed, so its pattern gets no gradient.
    assert (masked[mask == 0] == 0).all()


def test_statistics_by_hand():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    # Gini = Σ_i Σ_j |x_i - x_j| / (2 n² mean) = 20 / (2 * 16 * 2.5)
    assert gini(x) == pytest.approx(20 / 80)
    assert gini(torch.ones(5)) == 0.0
    # mean 2.5, population variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    assert coefficient_of_variation(x) == pytest.approx(1.25**0.5 / 2.5)
    # Pearson kurtosis: fourth moment (5.0625 + 0.0625 + 0.0625 + 5.0625) / 4 = 2.5625 over 1.25² = 1.64
    assert kurtosis(x) == pytest.approx(1.64)
    assert kurtosis(x, excess=True) == pytest.approx(1.64 - 3)
    table = pattern_statistics({"x": x})
    assert table.loc[0].to_dict() == pytest.approx(
        {"pattern": "x", "gini": 0.25, "cv": 1.25**0.5 / 2.5, "kurtosis": 1.64}
    )
    with pytest.raises(ValueError, match="non-negative"):
        gini(torch.tensor([-1.0, 1.0]))
    with pytest.raises(ValueError, match="mean"):
        coefficient_of_variation(torch.zeros(3))


def test_one_dominant_head_by_hand():
    # n = 5 scores [0, 0, 0, 0, 5]: mean 1; Σ|x_i - x_j| = 2 * 4 * 5 = 40 -> Gini 40 / (2 * 25 * 1) = 0.8;
    # variance (4 * 1 + 16) / 5 = 4 -> CV 2; fourth moment (4 * 1 + 256) / 5 = 52 -> kurtosis 52 / 16 = 3.25.
    x = torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0])
    assert gini(x) == pytest.approx(0.8)
    assert coefficient_of_variation(x) == pytest.approx(2.0)
    assert kurtosis(x) == pytest.approx(3.25)
    # A uniform spread is more even on every statistic.
    y = torch.tensor([0.8, 0.9, 1.0, 1.1, 1.2])
    assert gini(y) < gini(x) and coefficient_of_variation(y) < 2.0 and kurtosis(y) < 3.25


def test_trajectory_and_overlap_by_hand():
    final = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    table = pattern_trajectory({0: torch.tensor([[4.0, 3.0], [2.0, 1.0]]), 10: 2 * final, 20: final})
    assert table.step.tolist() == [0, 10, 20]
    assert table.correlation.tolist() == pytest.approx([-1.0, 1.0, 1.0])
    # MSE of 2x to x: mean of x² = 30 / 4; of the reversed pattern: (9 + 1 + 1 + 9) / 4
    assert table.mse.tolist() == pytest.approx([5.0, 7.5, 0.0])
    selected = top_heads(torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.2, 0.3]]), 2)
    assert selected.tolist() == [[0, 1, 0], [1, 0, 0]]
    reference = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    result = head_overlap(selected, reference)
    # 6 heads, 2 selected, 2 in the reference, 1 shared: expected 2 * 2 / 6;
    # P(overlap >= 1) = 1 - C(4, 2) / C(6, 2) = 1 - 6 / 15
    assert (result.overlap, result.k, result.m, result.n) == (1, 2, 2, 6)
    assert result.expected == pytest.approx(2 / 3)
    assert result.p_value == pytest.approx(1 - 6 / 15)
    with pytest.raises(ValueError, match="k must"):
        top_heads(final, 0)


def test_correlation_and_least_squares_fit():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 4, generator=generator), torch.randn(2, 4, generator=generator)
    target = 2 * a - 0.5 * b + 0.1
    fit = fit_pattern_change(target, {"a": a, "b": b}, intercept=True)
    assert fit.coefficients == pytest.approx({"a": 2.0, "b": -0.5}, abs=1e-6)
    assert fit.intercept == pytest.approx(0.1, abs=1e-6) and fit.r2 == pytest.approx(1.0)
    assert torch.allclose(fit.fitted, target, atol=1e-5)
    noisy = fit_pattern_change(target + torch.randn(2, 4, generator=generator), {"a": a})
    assert 0 <= noisy.r2 < 1
    corr = pattern_correlation({"a": a, "t": target, "neg": -a})
    assert corr.loc["a", "neg"] == pytest.approx(-1.0)
    assert corr.loc["a", "t"] == pytest.approx(np.corrcoef(a.flatten(), target.flatten())[0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning for a constant pattern: NaN says it
        flat = pattern_correlation({"a": a, "zero": torch.zeros_like(a)})
    assert np.isnan(flat.loc["a", "zero"]) and np.isnan(flat.loc["zero", "zero"]) and flat.loc["a", "a"] == 1.0
    with pytest.raises(ValueError, match="values"):
        fit_pattern_change(target, {"a": torch.ones(3)})


def test_shuffled_fit_is_the_chance_level():
    generator = torch.Generator().manual_seed(1)
    a, b = torch.rand(6, 8, generator=generator), torch.rand(6, 8, generator=generator)
    target = 0.7 * a + 0.3 * b
    assert fit_pattern_change(target, {"a": a, "b": b}).r2 == pytest.approx(1.0)
    chance = shuffled_fit_r2(target, {"a": a, "b": b}, n=200, seed=0)
    assert chance.shape == (200,) and chance.max() < 0.99
    # R² is against the target's mean: a fit without intercept on shuffled heads does worse than it.
    assert np.median(chance) < 0.5
    assert np.array_equal(chance, shuffled_fit_r2(target, {"a": a, "b": b}, n=200, seed=0))


def test_grouping_test_by_hand():
    # Four tasks in two pairs: a/b and c/d correlate 0.9 inside the pairs, 0.1 across them.
    names = ["a", "b", "c", "d"]
    matrix = np.full((4, 4), 0.1)
    matrix[0, 1] = matrix[1, 0] = matrix[2, 3] = matrix[3, 2] = 0.9
    np.fill_diagonal(matrix, 1.0)
    corr = pd.DataFrame(matrix, index=names, columns=names)
    result = grouping_test(corr, [["a", "b"], ["c", "d"]])
    assert result.within == pytest.approx(0.9) and result.between == pytest.approx(0.1)
    # 24 label orders fall on 3 pairings, 8 each: only the observed pairing reaches 0.9.
    assert result.n_assignments == 24 and result.p_value == pytest.approx(1 / 3)
    assert result.nearest_in_group == 4 and result.n_tasks == 4
    assert result.min_p == pytest.approx(1 / 3)  # no matrix could do better than 1 pairing in 3
    # Another pairing of the same matrix is at the bottom of its null distribution.
    wrong = grouping_test(corr, [["a", "c"], ["b", "d"]])
    assert wrong.within == pytest.approx(0.1) and wrong.p_value == pytest.approx(1.0)
    assert wrong.nearest_in_group == 0
    # The sampled p-value (above max_exact) agrees with the exact one.
    sampled = grouping_test(corr, [["a", "b"], ["c", "d"]], max_exact=3, n=3000, seed=1)
    assert sampled.n_assignments == 3000 and sampled.p_value == pytest.approx(1 / 3, abs=0.04)


@pytest.mark.parametrize(("groups", "min_p"), [([["a", "b"]], 1 / 15), ([["a", "b"], ["c", "d"]], 1 / 45)])
def test_the_grouping_tests_power_is_its_smallest_p_value(groups, min_p):
    # Six tasks: one pair is 1 of C(6,2) = 15 pairings; two pairs 1 of 45 (C(6,2)·C(4,2)/2).
    names = list("abcdef")
    singles = [[t] for t in names if not any(t in g for g in groups)]
    corr = pd.DataFrame(np.eye(6) + 0.5 * (1 - np.eye(6)), index=names, columns=names)
    corr.loc["a", "b"] = corr.loc["b", "a"] = 0.99
    corr.loc["c", "d"] = corr.loc["d", "c"] = 0.98
    result = grouping_test(corr, groups + singles)
    assert result.min_p == pytest.approx(min_p) and result.p_value == pytest.approx(min_p)


def test_grouping_test_refuses_bad_groups():
    corr = pd.DataFrame(np.eye(3), index=list("abc"), columns=list("abc"))
    with pytest.raises(ValueError, match="every task"):
        grouping_test(corr, [["a", "b"]])
    with pytest.raises(ValueError, match="every task"):
        grouping_test(corr, [["a", "b"], ["b", "c"]])
    with pytest.raises(ValueError, match="no group holds two"):
        grouping_test(corr, [["a"], ["b"], ["c"]])


def test_rank_by_pattern_by_hand():
    target = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    candidates = {
        "double": torch.tensor([[2.0, 4.0], [6.0, 8.0]]),
        "reverse": torch.tensor([[4.0, 3.0], [2.0, 1.0]]),
        "swap": torch.tensor([[1.0, 3.0], [2.0, 4.0]]),
        "shifted": target + 10,
    }
    # Pearson: deviations of the target (-1.5, -0.5, 0.5, 1.5); swap's (-1.5, 0.5, -0.5, 1.5): 4 / 5.
    pearson = rank_by_pattern(target, candidates)
    assert list(pearson.columns) == ["rank", "candidate", "similarity"]
    assert list(pearson["rank"]) == [1, 2, 3, 4]
    assert list(pearson.candidate) == ["double", "shifted", "swap", "reverse"]  # the tie keeps the given order
    assert list(pearson.similarity) == pytest.approx([1.0, 1.0, 0.8, -1.0])
    # Cosine: no mean removed, so the shift matters: 130 / sqrt(30 * 630); reverse 20 / 30; swap 29 / 30.
    cosine = rank_by_pattern(target, candidates, similarity="cosine")
    assert list(cosine.candidate) == ["double", "swap", "shifted", "reverse"]
    assert list(cosine.similarity) == pytest.approx([1.0, 29 / 30, 130 / np.sqrt(30 * 630), 2 / 3])


def test_rank_by_pattern_centred_against_a_plain_computation():
    generator = torch.Generator().manual_seed(2)
    shared = 5 * torch.randn(3, 4, generator=generator, dtype=torch.float64)
    candidates = {f"task{i}": shared + torch.randn(3, 4, generator=generator, dtype=torch.float64) for i in range(5)}
    target = candidates["task3"] + 0.3 * torch.randn(3, 4, generator=generator, dtype=torch.float64)
    plain = rank_by_pattern(target, candidates)
    expected = {n: scipy.stats.pearsonr(c.flatten(), target.flatten())[0] for n, c in candidates.items()}
    assert dict(zip(plain.candidate, plain.similarity)) == pytest.approx(expected)
    assert list(plain.candidate) == sorted(expected, key=expected.get, reverse=True)
    assert plain.similarity.min() > 0.8  # the shared change makes every candidate look alike
    mean = sum(candidates.values()) / len(candidates)
    centred = rank_by_pattern(target, candidates, center=True)
    expected = {
        n: scipy.stats.pearsonr((c - mean).flatten(), (target - mean).flatten())[0] for n, c in candidates.items()
    }
    assert dict(zip(centred.candidate, centred.similarity)) == pytest.approx(expected)
    assert centred.candidate[0] == "task3" and centred.similarity.iloc[1] < 0.5


def test_rank_by_pattern_refuses_bad_input():
    target = torch.tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="'b' has 2 values"):
        rank_by_pattern(target, {"a": target, "b": torch.ones(1, 2)})
    with pytest.raises(ValueError, match="'flat' is constant"):
        rank_by_pattern(target, {"a": target, "flat": torch.ones(1, 3)})
    with pytest.raises(ValueError, match="constant after centring"):
        rank_by_pattern(target, {"only": target}, center=True)
    with pytest.raises((TypeError, ValueError), match="similarity"):  # the Literal is checked on entry
        rank_by_pattern(target, {"a": target}, similarity="spearman")
    with pytest.raises(ValueError, match="no candidates"):
        rank_by_pattern(target, {})
