"""Masks in and out of other tools: reference checkpoints, head lists, node graphs (round trips, goldens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from headsup_lens import HeadMask, fingerprint
from headsup_lens.analysis import weight_trajectories
from headsup_lens.masks import (
    read_head_list,
    read_node_graph,
    read_reference,
    read_reference_checkpoints,
    write_head_list,
    write_node_graph,
    write_reference,
)

GOLDEN = Path(__file__).parent / "golden"
SHAPE = (2, 3)
# Fixed logits for the golden files: no value at exactly 0 (where the reference's > and >= differ).
LOGITS = torch.tensor([[2.5, -1.0, 0.25], [-3.0, 4.0, -0.5]])


def golden_mask() -> HeadMask:
    return HeadMask.from_logits(LOGITS)


def reference_kept(flat: torch.Tensor, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """What the reference code keeps: sigmoid(logit) > 0.5 on each layer's first n_heads slots."""
    grid = flat.view(n_layers, n_heads + 1)[:, :-1]
    return [tuple(h) for h in (torch.sigmoid(grid) > 0.5).nonzero().tolist()]


def test_a_reference_checkpoint_of_a_tiny_model_loads_to_the_heads_the_reference_keeps(llama, tmp_path):
    n_layers, n_heads = llama.cfg.n_layers, llama.cfg.n_heads
    # As the reference's Trainer saves its one-parameter model: checkpoint-N/model.safetensors, key "tensor".
    flat = 4.0 + 3.0 * torch.randn(n_layers * (n_heads + 1), generator=torch.Generator().manual_seed(0))
    flat[n_heads :: n_heads + 1] = -7.0  # FFN slots far below 0.5: they must not leak into the heads
    (tmp_path / "checkpoint-250").mkdir()
    save_file({"tensor": flat}, tmp_path / "checkpoint-250" / "model.safetensors", metadata={"format": "pt"})
    mask = read_reference(tmp_path / "checkpoint-250", llama)
    assert mask.kept_heads() == reference_kept(flat, n_layers, n_heads)
    assert 0 < mask.n_kept < mask.n_total
    assert mask.mlp_values is None and mask.metadata["ffn_logits"] == pytest.approx([-7.0] * n_layers)
    assert torch.equal(mask.logits, flat.view(n_layers, n_heads + 1)[:, :-1])
    as_mlp = read_reference(tmp_path / "checkpoint-250", llama, ffn="mlp")
    assert as_mlp.mlp_values.tolist() == [0.0] * n_layers and torch.equal(as_mlp.values, mask.values)


def test_write_reference_is_what_the_reference_reads(llama, tmp_path):
    logits = torch.randn(llama.cfg.n_layers, llama.cfg.n_heads, generator=torch.Generator().manual_seed(1))
    mask = HeadMask.from_logits(logits, fingerprint(llama))
    path = write_reference(mask, tmp_path / "checkpoint-10")
    assert path == tmp_path / "checkpoint-10" / "model.safetensors"
    flat = load_file(path)["tensor"]  # read as the reference's notebooks do
    assert flat.shape == (llama.cfg.n_layers * (llama.cfg.n_heads + 1),)
    assert reference_kept(flat, llama.cfg.n_layers, llama.cfg.n_heads) == mask.kept_heads()
    back = read_reference(path, llama)
    assert torch.equal(back.logits, mask.logits) and torch.equal(back.values, mask.values)
    # A binary mask (no logits) and an MLP mask survive too.
    binary = HeadMask.from_heads([(0, 1), (1, 0)], llama)
    binary.mlp_values = torch.tensor([1.0, 0.0])
    again = read_reference(write_reference(binary, tmp_path / "b.safetensors"), llama, ffn="mlp")
    assert torch.equal(again.values, binary.values) and again.mlp_values.tolist() == [1.0, 0.0]


def test_checkpoint_series_is_a_weight_trajectory(tmp_path):
    steps = [500, 20, 1000]
    for i, step in enumerate(steps):
        write_reference(HeadMask.from_logits(LOGITS - i), tmp_path / f"checkpoint-{step}")
    (tmp_path / "runs").mkdir()  # other Trainer folders are ignored
    masks = read_reference_checkpoints(tmp_path, SHAPE)
    got_steps, weights = weight_trajectories(masks)
    assert got_steps == [20, 500, 1000]
    assert torch.allclose(weights[0], torch.sigmoid(LOGITS - 1))
    assert torch.allclose(weights[1], torch.sigmoid(LOGITS))


def test_reference_layout_errors_name_the_problem(tmp_path):
    save_file({"tensor": torch.zeros(7)}, tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match=r"holds 7 logits; a 2 x 3 model needs n_layers \* \(n_heads \+ 1\) = 8"):
        read_reference(tmp_path / "m.safetensors", SHAPE)
    save_file({"weights": torch.zeros(8)}, tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="no tensor named 'tensor'"):
        read_reference(tmp_path / "w.safetensors", SHAPE)
    with pytest.raises(ValueError, match="has no model.safetensors"):
        read_reference(tmp_path, SHAPE)
    with pytest.raises(ValueError, match="no checkpoint-N/ folders"):
        read_reference_checkpoints(tmp_path, SHAPE)
    with pytest.raises(ValueError, match="ffn must be one of"):
        read_reference(tmp_path / "m.safetensors", SHAPE, ffn="keep")


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_head_list_round_trip(suffix, tmp_path):
    mask = golden_mask()
    path = write_head_list(tmp_path / f"heads{suffix}", mask.weights, mask=mask)
    heads = read_head_list(path)
    assert torch.equal(heads.scores_tensor(SHAPE), mask.weights)
    assert torch.equal(heads.to_mask(SHAPE).values, mask.values)
    # A bare list of heads says nothing about the others: the caller says what listing means.
    (tmp_path / "bare.json").write_text(json.dumps([[0, 1], [1, 2]]))
    bare = read_head_list(tmp_path / "bare.json")
    assert bare.to_mask(SHAPE, listed="removed").removed_heads() == [(0, 1), (1, 2)]
    assert bare.to_mask(SHAPE, listed="kept").kept_heads() == [(0, 1), (1, 2)]
    with pytest.raises(ValueError, match="no kept column"):
        bare.to_mask(SHAPE)
    with pytest.raises(ValueError, match=r"head \(1, 2\) is outside a 1 x 3 model"):
        bare.to_mask((1, 3), listed="kept")


def test_node_graph_round_trip_and_edges(tmp_path):
    mask = golden_mask()
    mask.mlp_values = torch.tensor([1.0, 0.0])
    path = write_node_graph(tmp_path / "graph.json", SHAPE, mask=mask, scores=mask.weights, edges=True)
    data = json.loads(path.read_text())
    assert set(data) == {"cfg", "nodes", "edges"}
    assert data["nodes"]["a0.h1"] == {"in_graph": False, "score": pytest.approx(float(torch.sigmoid(LOGITS[0, 1])))}
    # Non-parallel blocks: 3 heads x 3 inputs x (1 + 4 upstream in layer 1) ... counted by the formula.
    n_edges = sum(3 * 3 * (1 + 4 * l) + (1 + 4 * l + 3) for l in range(2)) + (1 + 4 * 2)
    assert len(data["edges"]) == n_edges
    assert data["edges"]["a0.h0->a1.h1<q>"]["in_graph"] is True
    assert data["edges"]["a0.h1->m1"]["in_graph"] is False  # a removed head's edges leave the graph
    graph = read_node_graph(path)
    assert torch.equal(graph.to_mask(SHAPE).values, mask.values)
    assert graph.to_mask(SHAPE).mlp_values.tolist() == [1.0, 0.0]
    assert torch.equal(graph.scores_tensor(SHAPE), mask.weights)


def test_golden_files(tmp_path):
    """Byte-for-byte: the files this version writes for a fixed 2 x 3 mask (regenerate on purpose only)."""
    mask = golden_mask()
    written = {
        "reference.safetensors": write_reference(mask, tmp_path / "reference.safetensors"),
        "heads.csv": write_head_list(tmp_path / "heads.csv", mask.weights, mask=mask),
        "heads.json": write_head_list(tmp_path / "heads.json", mask.weights, mask=mask),
        "graph.json": write_node_graph(tmp_path / "graph.json", SHAPE, mask=mask, scores=mask.weights),
    }
    for name, path in written.items():
        assert path.read_bytes() == (GOLDEN / name).read_bytes(), name
    # and the goldens read back to the mask
    assert torch.equal(read_reference(GOLDEN / "reference.safetensors", SHAPE).logits, LOGITS)
    for name in ("heads.csv", "heads.json"):
        assert torch.equal(read_head_list(GOLDEN / name).to_mask(SHAPE).values, mask.values)
    assert torch.equal(read_node_graph(GOLDEN / "graph.json").to_mask(SHAPE).values, mask.values)
