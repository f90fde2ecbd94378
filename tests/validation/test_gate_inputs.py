"""Bad masks, alphas and gate names are refused by both gates before anything runs."""

import math

import pytest
import torch

from headsup_lens import HeadMask, query_gate, value_gate
from headsup_lens.gates import gate_hooks, gated

from ..conftest import random_tokens
from .refusal import assert_refused

L, H = 2, 8  # the conftest Llama


def full(value=1.0, shape=(L, H)):
    return torch.full(shape, value)


def with_entry(value, index=(0, 3), shape=(L, H)):
    mask = torch.ones(shape)
    mask[index] = value
    return mask


def enter(gate, model, *args, **kwargs):
    def call():
        with gate(model, *args, **kwargs):
            pass

    return call


BAD_MASKS = [
    pytest.param(with_entry(-1.0), ValueError, ("mask", "[0, 1]", "-1 at (0, 3)"), id="negative"),
    pytest.param(with_entry(5.0), ValueError, ("mask", "[0, 1]", "5 at (0, 3)"), id="above-one"),
    pytest.param(with_entry(math.nan), ValueError, ("mask", "NaN", "nan at (0, 3)"), id="nan"),
    pytest.param(with_entry(math.inf), ValueError, ("mask", "finite", "inf at (0, 3)"), id="inf"),
    pytest.param(with_entry(-0.5, (1, 0, 3), (3, L, H)), ValueError, ("mask", "-0.5 at (1, 0, 3)"), id="per-row"),
    pytest.param(torch.ones(3, H), ValueError, ("mask", "[3, 8]", "[n_layers, n_heads] = [2, 8]"), id="layers"),
    pytest.param(torch.ones(L, 5), ValueError, ("mask", "[2, 5]", "does not fit"), id="heads"),
    pytest.param(torch.ones(2, 2, L, H), ValueError, ("mask", "[2, 2, 2, 8]"), id="four-dims"),
    pytest.param(torch.ones(0, L, H), ValueError, ("mask", "no rows", "[0, 2, 8]"), id="no-rows"),
    pytest.param(with_entry(5).long(), ValueError, ("mask", "[0, 1]", "5 at (0, 3)"), id="int-out-of-range"),
    pytest.param(torch.ones(L, H, dtype=torch.complex64), TypeError, ("mask",), id="complex"),
    pytest.param("all", TypeError, ("mask", "all"), id="string"),
]


@pytest.mark.parametrize("mask, error, fragments", BAD_MASKS)
def test_value_gate_refuses_bad_masks(llama, tmp_path, mask, error, fragments):
    assert_refused(enter(value_gate, llama, mask), error, *fragments, folder=tmp_path, model=llama)


@pytest.mark.parametrize("mask, error, fragments", BAD_MASKS[:6])
def test_query_gate_refuses_bad_masks(llama, tmp_path, mask, error, fragments):
    assert_refused(enter(query_gate, llama, mask), error, *fragments, folder=tmp_path, model=llama)


@pytest.mark.parametrize(
    "alpha, error, fragments",
    [
        pytest.param(1.5, ValueError, ("alpha", "1.5", "[0, 1]"), id="above-one"),
        pytest.param(-0.1, ValueError, ("alpha", "-0.1", "[0, 1]"), id="negative"),
        pytest.param(math.nan, ValueError, ("alpha", "nan"), id="nan"),
        pytest.param(math.inf, ValueError, ("alpha", "inf"), id="inf"),
        pytest.param(True, TypeError, ("alpha", "True"), id="bool"),
        pytest.param("0.5", TypeError, ("alpha", "0.5"), id="string"),
    ],
)
def test_alpha_is_checked(llama, alpha, error, fragments):
    assert_refused(enter(value_gate, llama, full(), alpha=alpha), error, *fragments, model=llama)
    assert_refused(enter(gated, llama, full(), alpha=alpha), error, *fragments, model=llama)


@pytest.mark.parametrize(
    "mlp, error, fragments",
    [
        pytest.param(torch.tensor([1.0, 2.0]), ValueError, ("mlp", "2 at 1", "[0, 1]"), id="above-one"),
        pytest.param(torch.tensor([1.0, math.nan]), ValueError, ("mlp", "nan at 1"), id="nan"),
        # Under run-time shape checking the annotation catches it first (n_layers bound by the mask).
        pytest.param(torch.ones(3), (ValueError, TypeError), ("mlp", "[3]"), id="shape"),
    ],
)
def test_mlp_mask_is_checked(llama, mlp, error, fragments):
    assert_refused(enter(value_gate, llama, full(), mlp=mlp), error, *fragments, model=llama)


def test_gate_name_and_query_alpha(llama):
    # Under run-time type checking the Literal annotation refuses it first, naming the same things.
    assert_refused(lambda: gate_hooks(llama, full(), gate="key"), (ValueError, TypeError), "gate", "'key'", "'value'")
    assert_refused(
        lambda: gate_hooks(llama, full(), gate="query", alpha=0.5), ValueError, "alpha=0.5", "value gate only"
    )


@pytest.mark.parametrize("gate", [value_gate, query_gate])
def test_per_row_masks_must_match_the_batch(llama, gate):
    tokens = random_tokens(llama, batch=3)

    def run():
        with gate(llama, torch.ones(2, L, H)):
            llama(tokens)

    assert_refused(run, ValueError, "mask has 2 rows", "has 3 rows", model=llama)


def test_model_must_be_a_model():
    assert_refused(enter(value_gate, "llama", full()), TypeError, "model", "llama")


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64])
def test_bool_and_integer_masks_read_as_floats(llama, dtype):
    tokens = random_tokens(llama, batch=2)
    keep = torch.ones(L, H)
    keep[0, :4] = 0
    with torch.no_grad():
        with value_gate(llama, keep):
            expected = llama(tokens)
        with value_gate(llama, keep.to(dtype)):
            got = llama(tokens)
    assert torch.equal(expected, got)


def test_bounds_are_allowed(llama):
    for alpha in (0.0, 1.0):
        with value_gate(llama, torch.zeros(L, H), alpha=alpha):
            pass


def test_a_mask_of_other_weights_with_the_same_structure_can_be_gated(llama):
    # Identity is checked where a mask meets a model (HeadMask.load, check_model); the gate checks structure.
    from dataclasses import replace

    from headsup_lens import fingerprint

    other = HeadMask(torch.ones(L, H), model=replace(fingerprint(llama), content_hash="sha256:" + "0" * 64))
    with value_gate(llama, other):
        pass
