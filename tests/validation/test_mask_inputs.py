"""Bad arguments to HeadMask and its methods are refused with messages naming them."""

import math

import pytest
import torch

from headsup_lens import HeadMask, random_jaccard
from headsup_lens.models import ModelFingerprint

from .refusal import assert_refused

FP = ModelFingerprint("LlamaForCausalLM", 2, 4, 8, 66, "tiny")


def values_with(value, index=(1, 2), shape=(2, 4)):
    values = torch.ones(shape)
    values[index] = value
    return values


@pytest.mark.parametrize(
    "kwargs, error, fragments",
    [
        pytest.param(
            dict(values=values_with(-1.0)), ValueError, ("mask values", "[0, 1]", "-1 at (1, 2)"), id="negative"
        ),
        pytest.param(dict(values=values_with(1.5)), ValueError, ("mask values", "1.5 at (1, 2)"), id="above-one"),
        pytest.param(dict(values=values_with(math.nan)), ValueError, ("mask values", "NaN", "nan at (1, 2)"), id="nan"),
        pytest.param(dict(values=torch.ones(8)), ValueError, ("mask values", "[8]", "[n_layers, n_heads]"), id="1-d"),
        pytest.param(dict(values=torch.ones(1, 2, 4)), ValueError, ("mask values", "[1, 2, 4]"), id="3-d"),
        pytest.param(
            dict(values=torch.ones(2, 4), logits=values_with(math.inf)),
            ValueError,
            ("mask logits", "inf at (1, 2)"),
            id="logits-inf",
        ),
        pytest.param(
            dict(values=torch.ones(2, 4), logits=torch.zeros(4, 2)),
            ValueError,
            ("logits shape [4, 2]", "values shape [2, 4]"),
            id="logits-shape",
        ),
        pytest.param(
            dict(values=torch.ones(2, 4), mlp_values=torch.tensor([1.0, 1.5])),
            ValueError,
            ("mlp_values", "1.5 at 1"),
            id="mlp-range",
        ),
        pytest.param(
            dict(values=torch.ones(2, 4), mlp_values=torch.ones(3)),
            ValueError,
            ("mlp_values", "[3]", "[n_layers] = [2]"),
            id="mlp-shape",
        ),
        pytest.param(
            dict(values=torch.ones(3, 4), model=FP),
            ValueError,
            ("mask shape [3, 4]", "2 layers x 4 heads"),
            id="model-shape",
        ),
        pytest.param(dict(values=torch.ones(2, 4), model="tiny"), TypeError, ("model", "tiny"), id="model-type"),
        pytest.param(
            dict(values=torch.ones(2, 4), metadata={"when": object()}),
            TypeError,
            ("metadata['when']", "object"),
            id="metadata-value",
        ),
        pytest.param(dict(values=torch.ones(2, 4), metadata={1: "a"}), TypeError, ("metadata", "1"), id="metadata-key"),
        pytest.param(
            dict(values=torch.ones(2, 4), metadata=["a"]), TypeError, ("metadata", "['a']"), id="metadata-list"
        ),
    ],
)
def test_constructor_refuses(tmp_path, kwargs, error, fragments):
    assert_refused(lambda: HeadMask(**kwargs), error, *fragments, folder=tmp_path)


MASK = HeadMask(torch.ones(2, 4), model=FP)


@pytest.mark.parametrize(
    "call, error, fragments",
    [
        pytest.param(
            lambda: HeadMask.from_logits(values_with(math.nan)), ValueError, ("mask logits", "nan"), id="logits-nan"
        ),
        pytest.param(
            lambda: HeadMask.from_logits(torch.zeros(4)), (ValueError, TypeError), ("logits", "[4]"), id="logits-1-d"
        ),
        pytest.param(lambda: HeadMask.full((0, 4)), ValueError, ("n_layers", ">= 1", "0"), id="full-zero"),
        pytest.param(lambda: HeadMask.full("2x4"), TypeError, ("model_or_shape", "'2x4'"), id="full-string"),
        pytest.param(lambda: HeadMask.full((2.0, 4)), TypeError, ("n_layers", "2.0"), id="full-float"),
        pytest.param(
            lambda: HeadMask.from_heads([(2, 0)], (2, 4)),
            ValueError,
            ("removed", "(2, 0)", "2 x 4"),
            id="from-heads-outside",
        ),
        pytest.param(lambda: MASK.without([(0, -1)]), ValueError, ("heads", "(0, -1)"), id="without-negative"),
        pytest.param(lambda: MASK.without([(0,)]), TypeError, ("heads", "(0,)"), id="without-short"),
        pytest.param(lambda: MASK.without([(0, 1.0)]), TypeError, ("heads", "1.0"), id="without-float"),
        pytest.param(lambda: MASK.without("0,1"), TypeError, ("heads", "'0,1'"), id="without-string"),
        pytest.param(lambda: MASK.shuffled(-1), ValueError, ("seed", "-1"), id="seed-negative"),
        pytest.param(lambda: MASK.shuffled(1.5), TypeError, ("seed", "1.5"), id="seed-float"),
        pytest.param(lambda: MASK.jaccard(torch.ones(2, 4)), TypeError, ("other",), id="jaccard-tensor"),
        pytest.param(
            lambda: MASK.recall(HeadMask(torch.ones(4, 2))), ValueError, ("[2, 4]", "[4, 2]"), id="recall-shape"
        ),
        pytest.param(lambda: random_jaccard(5, 3, 4), ValueError, ("size_a", "<= 4", "5"), id="jaccard-size"),
        pytest.param(lambda: random_jaccard(1, 1, 0), ValueError, ("n_total", ">= 1", "0"), id="jaccard-total"),
        pytest.param(lambda: MASK.check_model("tiny"), TypeError, ("model", "'tiny'"), id="check-model-type"),
        pytest.param(
            lambda: MASK.check_model(FP, allow_other_weights="yes"),
            TypeError,
            ("allow_other_weights", "'yes'"),
            id="allow-type",
        ),
    ],
)
def test_methods_refuse(tmp_path, call, error, fragments):
    # Where run-time type checking is on (the test suite), annotations refuse some of these first;
    # their messages name the same argument and value.
    assert_refused(call, error, *fragments, folder=tmp_path)
