"""Mask files from other tools are read against their format: nothing guessed, truncated or coerced."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from headsup_lens import FileFormatError, HeadMask
from headsup_lens.masks import (
    read_head_list,
    read_node_graph,
    read_reference,
    read_reference_checkpoints,
    reference_logits,
    write_head_list,
    write_node_graph,
    write_reference,
)

SHAPE = (2, 3)


def graph_file(tmp_path, shape=SHAPE, **changes):
    """A node graph written by `write_node_graph`, with `changes` applied to its JSON (node -> value)."""
    path = write_node_graph(tmp_path / "graph.json", shape, mask=HeadMask.from_heads([(0, 1)], shape))
    data = json.loads(path.read_text())
    for name, value in changes.items():
        data["nodes"][name] = value
    path.write_text(json.dumps(data))
    return path


# ---------------------------------------------------------------------- node graphs
def test_a_string_in_graph_is_an_error_not_a_kept_head(tmp_path):
    path = graph_file(tmp_path, **{"a0.h1": {"in_graph": "false", "score": 0.1}})
    with pytest.raises(FileFormatError, match=r"graph.json', node 'a0.h1', field 'in_graph': expected true or false"):
        read_node_graph(path)
    graph_file(tmp_path, **{"a0.h1": {"in_graph": 0}})
    with pytest.raises(FileFormatError, match="expected true or false, got 0"):
        read_node_graph(path)


def test_a_graph_of_a_smaller_model_is_refused_by_a_larger_one(tmp_path):
    path = write_node_graph(tmp_path / "graph.json", (4, 2), mask=HeadMask.from_heads([(3, 1)], (4, 2)))
    graph = read_node_graph(path)
    assert graph.shape == (4, 2)
    with pytest.raises(ValueError, match=r"written for a 4 x 2 model \(n_layers x n_heads\), not this 8 x 2 one"):
        graph.to_mask((8, 2))
    with pytest.raises(ValueError, match="not this 8 x 2 one"):
        graph.scores_tensor((8, 2)) if graph.scores else graph.to_mask((8, 2), listed="removed")
    with pytest.raises(ValueError, match="not this 8 x 2 one"):
        read_node_graph(path, (8, 2))
    assert read_node_graph(path, (4, 2)).to_mask((4, 2)).removed_heads() == [(3, 1)]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"a5.h0": {"in_graph": True}}, "head (5, 0) is outside the graph's own 2 x 3 cfg"),
        ({"a01.h0": {"in_graph": True}}, "is not a node of the format"),
        ({"b0": {"in_graph": True}}, "is not a node of the format"),
        ({"a0.h0": {"in_graph": True, "weight": 1}}, "unknown key(s) ['weight']"),
        ({"a0.h0": {"score": 1.0}}, "lacks the key(s) in_graph"),
        ({"a0.h0": {"in_graph": True, "score": "high"}}, "field 'score': expected a number"),
        ({"a0.h0": "yes"}, "expected an object with in_graph"),
    ],
)
def test_node_graph_fields_are_checked(tmp_path, change, message):
    with pytest.raises(FileFormatError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_node_graph(graph_file(tmp_path, **change))


def test_a_node_graph_lists_every_node_of_its_cfg_and_no_key_twice(tmp_path):
    path = graph_file(tmp_path)
    data = json.loads(path.read_text())
    del data["nodes"]["a1.h2"]
    path.write_text(json.dumps(data))
    with pytest.raises(FileFormatError, match="lacks 1 node.* of its 2 x 3 cfg, e.g. 'a1.h2'"):
        read_node_graph(path)
    text = graph_file(tmp_path).read_text().replace('"a0.h0":', '"a0.h1": {"in_graph": true}, "a0.h0":', 1)
    path.write_text(text)
    with pytest.raises(FileFormatError, match="the key 'a0.h1' appears twice"):
        read_node_graph(path)
    path.write_text(json.dumps({"cfg": {"n_layers": 2.0, "n_heads": 3}, "nodes": {}}))
    with pytest.raises(FileFormatError, match="field 'n_layers': expected an integer, got 2.0"):
        read_node_graph(path)


# ---------------------------------------------------------------------- head lists
@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"layer": 1.5, "head": 0, "kept": 1}], "entry 0, field 'layer': expected an integer, got 1.5"),
        ([{"layer": "1", "head": 0}], "entry 0, field 'layer': expected an integer, got '1'"),
        ([{"layer": 0, "head": True}], "field 'head': expected an integer, got True"),
        ([{"layer": -1, "head": 0}], "expected an integer >= 0, got -1"),
        ([{"layer": 0, "head": 0, "kept": 0.9}], "entry 0, field 'kept': expected 0 or 1 \\(or true/false\\), got 0.9"),
        ([{"layer": 0, "head": 0, "kept": "false"}], "field 'kept': expected 0 or 1 \\(or true/false\\), got 'false'"),
        ([{"layer": 0, "head": 0, "kept": 2}], "got 2"),
        (
            [{"layer": 0, "head": 0, "kept": 1}, {"layer": 0, "head": 0, "kept": 0}],
            "entry 1: names head \\(0, 0\\) again",
        ),
        ([{"layer": 0, "head": 0, "kept": 1}, {"layer": 0, "head": 1}], "entry 1, field 'kept': is missing"),
        ([{"layer": 0, "head": 0, "keep": 1}], "unknown key\\(s\\) \\['keep'\\]"),
        ([[0, 1, 2]], "expected a \\[layer, head\\] pair"),
    ],
)
def test_json_head_list_values_are_never_truncated_or_coerced(tmp_path, rows, message):
    path = tmp_path / "heads.json"
    path.write_text(json.dumps({"heads": rows}))
    with pytest.raises(FileFormatError, match=message):
        read_head_list(path)


def test_a_kept_of_0_9_no_longer_removes_every_head(tmp_path):
    rows = [{"layer": l, "head": h, "kept": 0.9} for l in range(2) for h in range(3)]
    (tmp_path / "heads.json").write_text(json.dumps(rows))
    with pytest.raises(FileFormatError, match="kept"):
        read_head_list(tmp_path / "heads.json").to_mask(SHAPE)
    rows = [{"layer": l, "head": h, "kept": True} for l in range(2) for h in range(3)]
    (tmp_path / "heads.json").write_text(json.dumps(rows))
    assert read_head_list(tmp_path / "heads.json").to_mask(SHAPE).n_kept == 6


@pytest.mark.parametrize(
    "text, message",
    [
        ("layer,head,kept\n0,0,1\n0,1,0.5\n", "row 2 \\(line 3\\), field 'kept': expected 0 or 1"),
        ("layer,head\n0,1.5\n", "row 1 \\(line 2\\), field 'head': expected an integer, got '1.5'"),
        ("layer,head,score\n0,0,high\n", "field 'score': expected a number, got 'high'"),
        ("layer,head,score\n0,0,1_0\n", "expected a number, got '1_0'"),
        ("layer,head\n0,0,7\n", "row 1 \\(line 2\\): has 3 fields, the header has 2"),
        ("layer,head,head\n0,0,1\n", "names the column\\(s\\) \\['head'\\] twice"),
        ("layer,head,name\n0,0,x\n", "unknown column\\(s\\) \\['name'\\]"),
        ("layer,head\n0,0\n0,0\n", "row 2 \\(line 3\\): names head \\(0, 0\\) again \\(first at row 1 \\(line 2\\)\\)"),
        ("layer\n0\n", "lacks the column\\(s\\) head"),
    ],
)
def test_csv_head_list_errors_name_the_row_and_field(tmp_path, text, message):
    path = tmp_path / "heads.csv"
    path.write_text(text)
    with pytest.raises(FileFormatError, match=message):
        read_head_list(path)


def test_csv_head_list_accepts_its_documented_forms(tmp_path):
    (tmp_path / "h.csv").write_text("layer, head, kept\n0, 0, true\n0, 1, False\n0,2,1\n1,0,0\n1,1,TRUE\n1,2,1\n")
    listing = read_head_list(tmp_path / "h.csv", SHAPE)
    assert listing.to_mask(SHAPE).removed_heads() == [(0, 1), (1, 0)]
    with pytest.raises(FileFormatError, match=r"row 4 \(line 5\): head \(2, 0\) is outside a 2 x 3 model"):
        (tmp_path / "h.csv").write_text("layer,head\n0,0\n0,1\n1,2\n2,0\n")
        read_head_list(tmp_path / "h.csv", SHAPE)


# ---------------------------------------------------------------------- reference layout
def test_a_reference_grid_is_never_flattened_onto_another_grid(tmp_path):
    # A [3, 3] grid (3 layers x 2 heads + FFN) holds 9 logits, as many as a 1 x 8 model needs flat.
    save_file({"tensor": torch.randn(3, 3)}, tmp_path / "grid.safetensors")
    with pytest.raises(FileFormatError, match=r"has shape \[3, 3\]; a 1 x 8 model needs \[n_layers, n_heads \+ 1\]"):
        read_reference(tmp_path / "grid.safetensors", (1, 8))
    assert read_reference(tmp_path / "grid.safetensors", (3, 2)).n_total == 6
    save_file({"tensor": torch.randn(3, 1, 3)}, tmp_path / "cube.safetensors")
    with pytest.raises(FileFormatError, match="has 3 dimensions"):
        read_reference(tmp_path / "cube.safetensors", (3, 2))
    save_file({"tensor": torch.ones(8, dtype=torch.int64)}, tmp_path / "int.safetensors")
    with pytest.raises(FileFormatError, match="expected floating-point logits, got a torch.int64 tensor"):
        read_reference(tmp_path / "int.safetensors", SHAPE)


@pytest.mark.parametrize("slot, where", [(3, "layer 0, its FFN slot"), (5, "layer 1, head 1")])
def test_a_nan_logit_is_an_error_not_a_removed_mlp(tmp_path, slot, where):
    flat = torch.full((8,), 2.0)
    flat[slot] = float("nan")
    save_file({"tensor": flat}, tmp_path / "m.safetensors")
    with pytest.raises(FileFormatError, match=f"1 logit.* NaN or infinite, the first at {where}"):
        read_reference(tmp_path / "m.safetensors", SHAPE, ffn="mlp")
    with pytest.raises(FileFormatError):
        reference_logits(tmp_path / "m.safetensors", SHAPE)
    with pytest.raises(ValueError, match="ffn_logit must be a finite number"):
        write_reference(HeadMask.full(SHAPE), tmp_path / "w.safetensors", ffn_logit=float("nan"))


def test_two_checkpoints_of_one_step_are_refused(tmp_path):
    for name in ("checkpoint-100", "checkpoint-0100", "checkpoint-200"):
        write_reference(HeadMask.full(SHAPE), tmp_path / name)
    with pytest.raises(FileFormatError, match="checkpoint-0100/ and checkpoint-100/ are both step 100"):
        read_reference_checkpoints(tmp_path, SHAPE)
    (tmp_path / "checkpoint-0100" / "model.safetensors").unlink()
    (tmp_path / "checkpoint-0100").rmdir()
    assert [m.metadata["step"] for m in read_reference_checkpoints(tmp_path, SHAPE)] == [100, 200]


def test_files_that_are_not_json_or_utf8_name_the_file(tmp_path):
    (tmp_path / "h.json").write_bytes(b'{"heads": [\xff]}')
    with pytest.raises(FileFormatError, match=r"head list .*h.json', line 1: not UTF-8 text"):
        read_head_list(tmp_path / "h.json")
    (tmp_path / "g.json").write_text('{"cfg": {"n_layers": 1,\n "n_heads": 1}, "nodes": {,}}')
    with pytest.raises(FileFormatError, match=r"node graph .*g.json', line 2, column \d+: not valid JSON"):
        read_node_graph(tmp_path / "g.json")
    with pytest.raises(FileFormatError, match="does not exist"):
        read_head_list(tmp_path / "missing.csv")
    with pytest.raises(FileFormatError, match="is a folder"):
        read_node_graph(tmp_path)


def test_head_lists_and_graphs_written_here_read_back_with_a_model(llama, tmp_path):
    mask = HeadMask.from_heads([(0, 1), (1, 7)], llama)
    listing = read_head_list(write_head_list(tmp_path / "h.csv", mask.weights, mask=mask), llama)
    assert torch.equal(listing.to_mask(llama).values, mask.values)
    graph = read_node_graph(write_node_graph(tmp_path / "g.json", llama, mask=mask), llama)
    assert graph.to_mask(llama).removed_heads() == [(0, 1), (1, 7)]
