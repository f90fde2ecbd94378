import numpy as np
import pytest
import scipy.stats
import torch

from headsup_lens import activation_pattern
from headsup_lens.analysis import (
    coefficient_of_variation,
    fit_pattern_change,
    gini,
    kurtosis,
    pattern_correlation,
    pattern_statistics,
)
from headsup_lens.data import tokenize_pairs

from ..conftest import random_mask

PAIRS = [("cat", "dog"), ("apple pie", "pear"), ("sun", "moon and stars"), ("a", "b")]


def manual_pattern(model, pairs, mask=None):
    """One example at a time, unpadded: full logits, mean answer cross-entropy, autograd w.r.t. a
    pattern that the hook swaps for a leaf tensor."""
    total = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    for pair in pairs:
        batch = tokenize_pairs(model, [pair])
        leaves = {}

        def swap(pattern, hook):
            leaves[hook.layer()] = pattern.detach().requires_grad_(True)
            return leaves[hook.layer()]

        hooks = [(f"blocks.{l}.attn.hook_pattern", swap) for l in range(model.cfg.n_layers)]
        if mask is not None:
            from headsup_lens.gates import value_gate_hooks

            hooks = value_gate_hooks(model, mask) + hooks
        with torch.enable_grad(), model.hooks(fwd_hooks=hooks):
            logits = model(batch.input_ids)
            loss = torch.nn.functional.cross_entropy(logits[0, :-1], batch.labels[0, 1:], ignore_index=-100)
            for layer in range(model.cfg.n_layers):
                (grad,) = torch.autograd.grad(loss, leaves[layer], retain_graph=True)
                total[layer] += (leaves[layer] * grad).abs().sum((-1, -2))[0].detach()
    return total / len(pairs)


def test_activation_pattern_equals_manual_autograd(any_model):
    expected = manual_pattern(any_model, PAIRS)
    for batch_size in (1, 3):
        pattern = activation_pattern(any_model, PAIRS, batch_size=batch_size)
        assert pattern.shape == (any_model.cfg.n_layers, any_model.cfg.n_heads)
        assert torch.allclose(pattern, expected, rtol=1e-4, atol=1e-7)
    assert (expected > 0).all()


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
    assert coefficient_of_variation(x) == pytest.approx(np.std([1, 2, 3, 4]) / 2.5)
    assert kurtosis(x) == pytest.approx(scipy.stats.kurtosis([1, 2, 3, 4]))
    table = pattern_statistics({"x": x})
    assert table.loc[0, "gini"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="non-negative"):
        gini(torch.tensor([-1.0, 1.0]))


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
    with pytest.raises(ValueError, match="values"):
        fit_pattern_change(target, {"a": torch.ones(3)})
