"""Property-based tests of HeadMask files: every mask the constructor accepts saves and loads back equal
(hard, soft or from logits, with an MLP slot and nested metadata); every altered header is loaded or
refused with a ValueError naming the file, never another error."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import HeadMask
from headsup_lens.masks import UnverifiedMaskWarning
from headsup_lens.masks._files import content_checksum, read_safetensors, write_safetensors
from headsup_lens.models import ModelFingerprint

shapes = st.tuples(st.integers(1, 5), st.integers(1, 6))
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
unit32 = st.floats(0.0, 1.0, width=32)
# JSON that reads back equal (NaN never equals itself, so it is left out here; tuples become lists).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
# Keys JSON would turn into strings: refused at any depth.
not_string_keys = st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False) | st.tuples(st.integers())


def grid(draw, elements, shape) -> torch.Tensor:
    n = shape[0] * shape[1]
    return torch.tensor(draw(st.lists(elements, min_size=n, max_size=n)), dtype=torch.float32).view(shape)


@st.composite
def head_masks(draw) -> HeadMask:
    shape = draw(shapes)
    kind = draw(st.sampled_from(["logits", "binary", "soft"]))
    if kind == "logits":
        logits = grid(draw, floats32, shape)
        values = (logits >= 0).float()
    else:
        logits = None
        values = grid(draw, st.sampled_from([0.0, 1.0]) if kind == "binary" else unit32, shape)
    mlp = None
    if draw(st.booleans()):
        mlp = torch.tensor(draw(st.lists(unit32, min_size=shape[0], max_size=shape[0])), dtype=torch.float32)
    model = None
    if draw(st.booleans()):
        content_hash = draw(st.none() | st.just("sha256:" + "ab" * 32))
        model = ModelFingerprint("LlamaForCausalLM", shape[0], shape[1], 8, 66, "tiny", content_hash)
    metadata = draw(st.dictionaries(st.text(max_size=6), json_values, max_size=4))
    return HeadMask(values, logits=logits, model=model, mlp_values=mlp, metadata=metadata)


def equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


@given(mask=head_masks())
def test_every_mask_the_constructor_accepts_saves_and_loads_back_equal(mask):
    with tempfile.TemporaryDirectory() as folder:
        path = mask.save(Path(folder) / "m.safetensors")
        back = HeadMask.load(path)
        again = HeadMask.load(back.save(Path(folder) / "again.safetensors"))
        same_bytes = path.read_bytes() == (Path(folder) / "again.safetensors").read_bytes()
    assert equal(back.values, mask.values) and equal(back.logits, mask.logits)
    assert equal(back.mlp_values, mask.mlp_values)
    assert back.model == mask.model and back.metadata == mask.metadata
    assert equal(again.values, back.values) and again.metadata == back.metadata and same_bytes


@given(data=st.data(), key=not_string_keys, wraps=st.lists(st.sampled_from([dict, list]), max_size=3))
def test_a_key_json_would_turn_into_a_string_is_refused_at_any_depth(data, key, wraps):
    inner = {key: data.draw(json_values)}
    for wrap in wraps:
        inner = {"k": inner} if wrap is dict else [inner]
    metadata = {"top": inner} if wraps else inner
    with pytest.raises(TypeError, match="metadata"):
        HeadMask(torch.ones(1, 2), metadata=metadata)


@given(mask=head_masks(), data=st.data())
def test_logits_the_values_disagree_with_are_refused_by_the_constructor_as_by_load(mask, data):
    if mask.logits is None:
        return
    layer = data.draw(st.integers(0, mask.n_layers - 1))
    head = data.draw(st.integers(0, mask.n_heads - 1))
    values = mask.values.clone()
    old = values[layer, head].item()
    values[layer, head] = data.draw(unit32.filter(lambda v: v != old))
    with pytest.raises(ValueError, match=r"inconsistent with logits.*1\[sigmoid\(logits\) >= 0.5\]"):
        HeadMask(values, logits=mask.logits)
    with tempfile.TemporaryDirectory() as folder:  # the same mask written around the constructor
        tensors, header = read_safetensors(mask.save(Path(folder) / "m.safetensors"))
        tensors["values"] = values
        header["checksum"] = content_checksum(tensors, header)
        path = write_safetensors(Path(folder) / "altered.safetensors", tensors, header)
        with pytest.raises(ValueError, match=r"altered.safetensors.*inconsistent with logits"):
            HeadMask.load(path)


header_values = st.text(max_size=12) | json_values.map(json.dumps)


@given(mask=head_masks(), data=st.data(), checksum=st.booleans())
def test_an_altered_header_entry_is_loaded_or_refused_naming_the_file(mask, data, checksum):
    with tempfile.TemporaryDirectory() as folder:
        tensors, header = read_safetensors(mask.save(Path(folder) / "m.safetensors"))
        key = data.draw(st.sampled_from(["format", "version", "model", "metadata", "extra"]))
        if data.draw(st.booleans()) and key in header:
            del header[key]
        else:
            header[key] = data.draw(header_values)
        if checksum:
            header["checksum"] = content_checksum(tensors, header)
        path = write_safetensors(Path(folder) / "altered.safetensors", tensors, header)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnverifiedMaskWarning)
                back = HeadMask.load(path)
        except ValueError as error:
            assert type(error) is ValueError and "altered.safetensors" in str(error), error
        else:  # accepted: the change kept a valid mask of this format version
            assert header.get("format") == "headsup_lens.HeadMask" and header.get("version") == "1"
            assert equal(back.values, mask.values) and isinstance(back.metadata, dict)
