"""Property-based tests of the mask interchange readers: every file written here reads back to the same
mask, and every damaged file is a `FileFormatError` (never a KeyError, IndexError, TypeError, ...)."""

from __future__ import annotations

import csv
import json
import re
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import FileFormatError, HeadMask
from headsup_lens.masks import (
    read_head_list,
    read_node_graph,
    read_reference,
    write_head_list,
    write_node_graph,
    write_reference,
)

shapes = st.tuples(st.integers(1, 4), st.integers(1, 4))
# float32 values: the writers store the mask's float32 tensors, so these survive exactly.
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
scores32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def masks(draw, *, with_logits: bool = True) -> HeadMask:
    n_layers, n_heads = draw(shapes)
    if with_logits and draw(st.booleans()):
        logits = torch.tensor(draw(st.lists(floats32, min_size=n_layers * n_heads, max_size=n_layers * n_heads)))
        mask = HeadMask.from_logits(logits.view(n_layers, n_heads).clamp(-1e30, 1e30))
    else:
        kept = draw(st.lists(st.booleans(), min_size=n_layers * n_heads, max_size=n_layers * n_heads))
        mask = HeadMask(torch.tensor(kept, dtype=torch.float32).view(n_layers, n_heads))
    if draw(st.booleans()):
        mask.mlp_values = torch.tensor(
            draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n_layers, max_size=n_layers))
        )
    return mask


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN where NaN (scores may be NaN: "not scored")."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def scores_for(draw, mask: HeadMask) -> torch.Tensor:
    n = mask.n_total
    return torch.tensor(draw(st.lists(scores32, min_size=n, max_size=n)), dtype=torch.float32).view(mask.values.shape)


@given(data=st.data(), mask=masks(with_logits=False), suffix=st.sampled_from([".csv", ".json"]))
def test_head_lists_round_trip(data, mask, suffix):
    scores = scores_for(data.draw, mask) if data.draw(st.booleans()) else None
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        listing = read_head_list(write_head_list(Path(folder) / f"heads{suffix}", scores, mask=mask), shape)
    assert torch.equal(listing.to_mask(shape).values, mask.values)
    assert (listing.scores is None) == (scores is None)
    if scores is not None:
        assert same(listing.scores_tensor(shape), scores)


@given(data=st.data(), mask=masks(), edges=st.booleans())
def test_node_graphs_round_trip(data, mask, edges):
    scores = scores_for(data.draw, mask) if data.draw(st.booleans()) else None
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        path = write_node_graph(Path(folder) / "graph.json", shape, mask=mask, scores=scores, edges=edges)
        graph = read_node_graph(path, shape)
    back = graph.to_mask(shape)
    assert torch.equal(back.values, mask.binary().values)
    expected_mlp = mask.mlp_values if mask.mlp_values is not None else torch.ones(shape[0])
    assert torch.equal(back.mlp_values, expected_mlp)
    if scores is not None:
        assert same(graph.scores_tensor(shape), scores)


@given(mask=masks(), ffn=st.sampled_from(["drop", "mlp"]), folder_form=st.booleans())
def test_reference_files_round_trip(mask, ffn, folder_form):
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / ("checkpoint-7" if folder_form else "m.safetensors")
        back = read_reference(write_reference(mask, target), shape, ffn=ffn)
    assert torch.equal(back.values, mask.binary().values)
    if mask.logits is not None:
        assert torch.equal(back.logits, mask.logits)
    if ffn == "mlp" and mask.mlp_values is not None:
        assert torch.equal(back.mlp_values, mask.mlp_values)


def _damage(data: dict | list, draw) -> dict | list:
    """`data` with one value somewhere replaced by an arbitrary JSON value (or a key removed)."""
    if isinstance(data, dict) and data:
        key = draw(st.sampled_from(sorted(data)))
        if draw(st.booleans()):
            return {k: v for k, v in data.items() if k != key}
        inner = data[key]
        value = _damage(inner, draw) if isinstance(inner, (dict, list)) and draw(st.booleans()) else draw(json_values)
        return {**data, key: value}
    if isinstance(data, list) and data:
        i = draw(st.integers(0, len(data) - 1))
        inner = data[i]
        value = _damage(inner, draw) if isinstance(inner, (dict, list)) and draw(st.booleans()) else draw(json_values)
        return [*data[:i], value, *data[i + 1 :]]
    return draw(json_values)


def read_or_refuse(read, path: Path, shape) -> None:
    """A reader either accepts the file (a damage that kept it valid) or raises FileFormatError/ValueError
    that names the file; anything else is a bug."""
    try:
        result = read(path, shape)
        if hasattr(result, "to_mask") and result.kept is not None:
            result.to_mask(shape)
    except FileFormatError as error:
        assert str(path) in str(error)
    except ValueError as error:  # a whole-list rule checked against the model (missing heads, MLP nodes)
        assert type(error) is ValueError and ("head list" in str(error) or str(path) in str(error)), error


@given(data=st.data(), mask=masks(with_logits=False), kind=st.sampled_from(["heads.json", "graph.json"]))
def test_arbitrarily_damaged_json_mask_files_are_read_or_refused_cleanly(data, mask, kind):
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / kind
        if kind == "heads.json":
            write_head_list(path, mask.weights, mask=mask)
        else:
            write_node_graph(path, shape, mask=mask, scores=mask.weights)
        path.write_text(json.dumps(_damage(json.loads(path.read_text()), data.draw)))
        read_or_refuse(read_head_list if kind == "heads.json" else read_node_graph, path, shape)


# What each field must not be: every value drawn here breaks the field's declared type.
others = (
    st.none()
    | st.text(max_size=4)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)
)
not_an_index = others | st.booleans() | st.floats() | st.integers(max_value=-1)
not_a_flag = others | st.floats() | st.integers().filter(lambda v: v not in (0, 1))
not_a_boolean = others | st.floats() | st.integers()
not_a_number = others | st.booleans()
INVALID = {"layer": not_an_index, "head": not_an_index, "kept": not_a_flag, "score": not_a_number}


@given(data=st.data(), mask=masks(with_logits=False), field=st.sampled_from(sorted(INVALID)))
def test_a_head_list_field_of_the_wrong_type_is_a_format_error_naming_it(data, mask, field):
    with tempfile.TemporaryDirectory() as folder:
        path = write_head_list(Path(folder) / "heads.json", mask.weights, mask=mask)
        rows = json.loads(path.read_text())["heads"]
        i = data.draw(st.integers(0, len(rows) - 1))
        rows[i][field] = data.draw(INVALID[field])
        path.write_text(json.dumps({"heads": rows}))
        with pytest.raises(FileFormatError) as info:
            read_head_list(path)
    assert f"entry {i}, field {field!r}: expected" in str(info.value)


@given(data=st.data(), mask=masks(with_logits=False), field=st.sampled_from(["in_graph", "score"]))
def test_a_node_field_of_the_wrong_type_is_a_format_error_naming_it(data, mask, field):
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        path = write_node_graph(Path(folder) / "g.json", shape, mask=mask, scores=mask.weights)
        graph = json.loads(path.read_text())
        name = data.draw(st.sampled_from(sorted(graph["nodes"])))
        bad = data.draw(not_a_boolean if field == "in_graph" else not_a_number.filter(lambda v: v is not None))
        graph["nodes"][name][field] = bad
        path.write_text(json.dumps(graph))
        with pytest.raises(FileFormatError) as info:
            read_node_graph(path)
    assert f"node {name!r}, field {field!r}: expected" in str(info.value)


@given(data=st.data(), mask=masks(with_logits=False), n_layers=st.integers(1, 5), n_heads=st.integers(1, 5))
def test_a_node_graph_is_refused_by_a_model_of_another_shape(data, mask, n_layers, n_heads):
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        path = write_node_graph(Path(folder) / "g.json", shape, mask=mask)
        graph = read_node_graph(path)
    if (n_layers, n_heads) == shape:
        assert torch.equal(graph.to_mask((n_layers, n_heads)).values, mask.values)
    else:
        with pytest.raises(ValueError, match=f"written for a {shape[0]} x {shape[1]} model"):
            graph.to_mask((n_layers, n_heads))


CSV_INVALID = {
    "layer": st.text(max_size=4).filter(lambda t: not re.fullmatch(r"\s*\+?[0-9]+\s*", t)),
    "kept": st.text(max_size=5).filter(lambda t: t.strip().lower() not in ("0", "1", "true", "false")),
    "score": st.text(max_size=5).filter(lambda t: not _is_number(t)),
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return "_" not in text


@given(data=st.data(), mask=masks(with_logits=False), field=st.sampled_from(sorted(CSV_INVALID)))
def test_a_csv_cell_of_the_wrong_type_is_a_format_error_naming_its_row(data, mask, field):
    with tempfile.TemporaryDirectory() as folder:
        path = write_head_list(Path(folder) / "h.csv", mask.weights, mask=mask)
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        i = data.draw(st.integers(0, len(rows) - 1))
        rows[i][field] = data.draw(CSV_INVALID[field])
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        with pytest.raises(FileFormatError) as info:
            read_head_list(path)
    assert f"row {i + 1} (line " in str(info.value) and f"field {field!r}: expected" in str(info.value)


@given(mask=masks(with_logits=False), text=st.text(max_size=40), kind=st.sampled_from(["h.csv", "h.json", "g.json"]))
def test_arbitrary_text_is_never_an_internal_error(mask, text, kind):
    shape = tuple(mask.values.shape)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / kind
        path.write_text(text, encoding="utf-8")
        read_or_refuse(read_node_graph if kind == "g.json" else read_head_list, path, shape)


@given(
    shape=shapes,
    stored=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    values=st.sampled_from([0.0, float("nan"), float("inf")]),
)
def test_reference_files_of_other_shapes_or_values_are_format_errors(shape, stored, values):
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.safetensors"
        save_file({"tensor": torch.full(stored, values)}, path)
        try:
            read_reference(path, shape)
        except FileFormatError as error:
            assert str(path) in str(error)
        else:  # accepted: the file had the model's layout and finite logits
            n = shape[0] * (shape[1] + 1)
            assert values == 0.0 and (stored == [n] or stored == [shape[0], shape[1] + 1])


@given(steps=st.lists(st.integers(0, 10**6), min_size=1, max_size=4, unique=True), data=st.data())
def test_checkpoint_series_read_in_step_order_and_refuse_a_step_twice(steps, data):
    from headsup_lens.masks import read_reference_checkpoints

    with tempfile.TemporaryDirectory() as folder:
        for i, step in enumerate(steps):
            write_reference(HeadMask.from_logits(torch.full((1, 2), float(i + 1))), Path(folder) / f"checkpoint-{step}")
        masks = read_reference_checkpoints(folder, (1, 2))
        assert [m.metadata["step"] for m in masks] == sorted(steps)
        again = data.draw(st.sampled_from(steps))
        write_reference(HeadMask.full((1, 2)), Path(folder) / f"checkpoint-0{again}")
        with pytest.raises(FileFormatError, match=f"are both step {again}"):
            read_reference_checkpoints(folder, (1, 2))
