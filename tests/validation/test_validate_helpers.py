"""The shared checks of headsup_lens._validate, called directly (no annotations in the way)."""

import math

import numpy as np
import pytest
import torch

from headsup_lens import _validate as v

from .refusal import assert_refused


@pytest.mark.parametrize(
    "value, kwargs, error, fragments",
    [
        pytest.param(True, {}, TypeError, ("steps", "True", "integer"), id="bool"),
        pytest.param(3.0, {}, TypeError, ("steps", "3.0", "integer"), id="float"),
        pytest.param("3", {}, TypeError, ("steps", "'3'"), id="string"),
        pytest.param(0, dict(minimum=1), ValueError, ("steps", ">= 1", "0"), id="below"),
        pytest.param(11, dict(maximum=10), ValueError, ("steps", "<= 10", "11"), id="above"),
    ],
)
def test_check_int_refuses(value, kwargs, error, fragments):
    assert_refused(lambda: v.check_int("steps", value, **kwargs), error, *fragments)


def test_check_int_accepts_integers_of_any_kind():
    assert [v.check_int("n", x) for x in (3, np.int64(3), torch.tensor(3))] == [3, 3, 3]


@pytest.mark.parametrize(
    "value, kwargs, error, fragments",
    [
        pytest.param(True, {}, TypeError, ("lr", "True", "real number"), id="bool"),
        pytest.param("0.1", {}, TypeError, ("lr", "'0.1'"), id="string"),
        pytest.param(torch.ones(2), {}, TypeError, ("lr", "shape (2,)"), id="tensor"),
        pytest.param(math.nan, {}, ValueError, ("lr", "nan", "finite"), id="nan"),
        pytest.param(math.inf, {}, ValueError, ("lr", "inf", "finite"), id="inf"),
        pytest.param(-0.5, dict(low=0.0, high=1.0), ValueError, ("lr", "-0.5", "[0, 1]"), id="below"),
        pytest.param(0.0, dict(low=0.0, low_open=True), ValueError, ("lr", "0.0", "(0, inf)"), id="open-bound"),
    ],
)
def test_check_float_refuses(value, kwargs, error, fragments):
    assert_refused(lambda: v.check_float("lr", value, **kwargs), error, *fragments)


def test_check_float_accepts_ints_numpy_and_scalar_tensors():
    assert [v.check_float("x", y, 0.0, 1.0) for y in (1, np.float32(0.5), torch.tensor(0.25))] == [1.0, 0.5, 0.25]
    assert v.check_float("x", math.inf, finite=False) == math.inf


def test_check_shape_names_pattern_and_sizes():
    assert (
        v.check_shape("m", torch.ones(4, 2, 8), "n_layers n_heads", "batch n_layers n_heads", n_layers=2, n_heads=8)
        == "batch n_layers n_heads"
    )
    assert_refused(
        lambda: v.check_shape("m", torch.ones(2, 7), "n_layers n_heads", n_layers=2, n_heads=8),
        ValueError,
        "m has shape [2, 7]",
        "[n_layers, n_heads] = [2, 8]",
    )
    assert_refused(lambda: v.check_shape("sq", torch.ones(2, 3), "n n"), ValueError, "[2, 3]", "[n, n]")


def test_check_mask_values_counts_and_places_the_offenders():
    values = torch.ones(2, 8)
    values[0, 1:6] = 2.0
    message = assert_refused(lambda: v.check_mask_values("mask", values), ValueError, "mask", "[0, 1]")
    assert "5 of 16" in message and "2 at (0, 1)" in message and "first 3 shown" in message


def test_check_tensor_and_choice():
    assert v.check_tensor("m", torch.ones(2, dtype=torch.bool)).dtype == torch.float32
    assert_refused(lambda: v.check_tensor("m", [1, 0]), TypeError, "m", "[1, 0]", "torch.Tensor")
    assert_refused(lambda: v.check_choice("gate", "key", ("value", "query")), ValueError, "gate", "'key'", "'value'")


def test_check_out_dir(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b"
    assert v.check_out_dir(target) == target and not (tmp_path / "a").exists()  # creates nothing
    (tmp_path / "file").write_text("x")
    assert_refused(
        lambda: v.check_out_dir(tmp_path / "file"), ValueError, "out_dir", "file", "is a file", folder=tmp_path
    )
    assert_refused(
        lambda: v.check_out_dir(tmp_path / "file" / "sub"),
        ValueError,
        "cannot be created",
        "is a file",
        folder=tmp_path,
    )
    assert v.check_out_dir(tmp_path) == tmp_path and sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    monkeypatch.setattr(v.os, "access", lambda *args: False)
    assert_refused(
        lambda: v.check_out_dir(tmp_path / "new"), ValueError, "not writable", str(tmp_path), folder=tmp_path
    )
    assert_refused(lambda: v.check_out_dir(3), TypeError, "out_dir", "3")
