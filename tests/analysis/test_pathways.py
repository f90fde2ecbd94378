import itertools
import math

import pytest
import torch

from headsup_lens import HeadMask, pathway_heads
from headsup_lens.analysis import (
    TRAJECTORY_KINDS,
    crossing_counts,
    jaccard_matrix,
    jaccard_table,
    pathway_recovery,
    trajectory_crossings,
    trajectory_table,
    weight_trajectories,
)
from headsup_lens.masks import random_jaccard


def mask_of(rows):
    return HeadMask(torch.tensor(rows, dtype=torch.float32))


A = mask_of([[1, 1, 0], [1, 0, 0]])  # 3 kept
B = mask_of([[1, 0, 0], [1, 1, 1]])  # 4 kept
C = mask_of([[1, 1, 0], [1, 0, 1]])  # 4 kept


def test_pathway_heads_counts_and_groups():
    pathways = pathway_heads({"a": A, "b": B, "c": C})
    assert pathways.counts.tolist() == [[3, 2, 0], [3, 1, 2]]
    assert pathways.used_by_all() == [(0, 0), (1, 0)]
    assert pathways.used_by_none() == [(0, 2)]
    assert pathways.used_by_some() == [(0, 1), (1, 1), (1, 2)]
    assert pathways.used_by_all(["a", "c"]) == [(0, 0), (0, 1), (1, 0)]
    assert pathways.used_by_none(["a"]) == [(0, 2), (1, 1), (1, 2)]
    assert pathways.summary() == {"masks": 3, "heads": 6, "used_by_all": 2, "used_by_some": 3, "used_by_none": 1}
    table = pathways.table()
    assert table["count"].tolist() == [3, 2, 0, 3, 1, 2]
    with pytest.raises(ValueError, match="unknown"):
        pathways.used_by_all(["z"])


def test_jaccard_expectation_and_recall_by_hand():
    table = jaccard_table({"a": A, "b": B, "c": C}).set_index(["mask_a", "mask_b"])
    # a ∩ b = {(0,0), (1,0)}, a ∪ b = 5 heads.
    ab = table.loc[("a", "b")]
    assert ab.jaccard == pytest.approx(2 / 5)
    overlap = 3 * 4 / 6  # |a||b|/N
    assert ab.expected == pytest.approx(overlap / (3 + 4 - overlap))
    assert ab.recall == pytest.approx(2 / 3)  # of the smaller mask a
    bc = table.loc[("b", "c")]  # ∩ = {(0,0),(1,0),(1,2)}, ∪ = 5
    assert bc.jaccard == pytest.approx(3 / 5) and bc.recall == pytest.approx(3 / 4)
    assert bc.expected == pytest.approx((16 / 6) / (8 - 16 / 6))
    matrix = jaccard_matrix([A, B, C])
    assert matrix.to_numpy().diagonal().tolist() == [1.0, 1.0, 1.0]
    assert matrix.loc["0", "2"] == pytest.approx(3 / 4)  # a ⊂ c: 3 / 4
    with pytest.raises(ValueError, match="shapes"):
        jaccard_table([A, HeadMask(torch.ones(3, 3))])


def test_overlap_p_value_against_every_random_mask():
    """Brute force: every mask of b's size among the 6 heads, counted when it shares at least as
    many kept heads with a as b does (hence has at least b's Jaccard)."""
    from itertools import combinations

    table = jaccard_table({"a": A, "b": B, "c": C}).set_index(["mask_a", "mask_b"])
    heads = range(6)
    for (name_a, name_b), ma, mb in ((("a", "b"), A, B), (("a", "c"), A, C), (("b", "c"), B, C)):
        kept_a = {i for i in heads if ma.values.flatten()[i] > 0}
        kept_b = {i for i in heads if mb.values.flatten()[i] > 0}
        overlap = len(kept_a & kept_b)
        draws = list(combinations(heads, len(kept_b)))
        at_least = sum(len(kept_a & set(d)) >= overlap for d in draws)
        row = table.loc[(name_a, name_b)]
        assert row.overlap == overlap
        assert row.p_value == pytest.approx(at_least / len(draws))
        jaccards = [len(kept_a & set(d)) / len(kept_a | set(d)) for d in draws]
        assert row.p_value == pytest.approx(sum(j >= row.jaccard - 1e-12 for j in jaccards) / len(draws))
    assert table.loc[("a", "c"), "p_value"] == pytest.approx(3 / 15)  # a ⊂ c: C(3,3)·C(3,1) of C(6,4)


def test_weight_trajectories_from_masks_tensor_and_run_folder(tmp_path):
    logits = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(0))
    steps, weights = weight_trajectories(logits)
    assert steps == [0, 1, 2, 3] and torch.allclose(weights, torch.sigmoid(logits))
    masks = [HeadMask.from_logits(l, step=10 * i) for i, l in enumerate(logits)]
    steps, from_masks = weight_trajectories(masks)
    assert steps == [0, 10, 20, 30] and torch.allclose(from_masks, weights)
    # A run folder written the way training writes its checkpoints.
    from safetensors.torch import save_file

    (tmp_path / "checkpoints").mkdir()
    for step, l in zip([5, 10], logits[:2]):
        save_file(
            {"logits": l[None].contiguous()},
            str(tmp_path / "checkpoints" / f"logits_step{step:07d}.safetensors"),
            metadata={"step": str(step), "tasks": "t"},
        )
    steps, from_run = weight_trajectories(tmp_path)
    assert steps == [5, 10] and torch.allclose(from_run, weights[:2])
    with pytest.raises(ValueError, match="logits"):
        weight_trajectories([HeadMask(torch.ones(2, 3))])
    assert math.isclose(float(weights.max()), float(torch.sigmoid(logits).max()))


def test_trajectory_crossings_against_hand_counted_heads():
    # Six heads, five checkpoints, one of each kind (two crossings for the transient ones).
    series = torch.tensor(
        [
            [0.9, 0.9, 0.8, 0.9, 0.95],  # kept throughout
            [0.1, 0.2, 0.1, 0.3, 0.05],  # removed throughout
            [0.1, 0.3, 0.6, 0.7, 0.9],  # joined
            [0.9, 0.6, 0.4, 0.2, 0.1],  # left
            [0.05, 0.4, 0.7, 0.6, 0.2],  # joined and left
            [0.9, 0.3, 0.2, 0.5, 0.8],  # left and came back (0.5 counts as inside)
        ]
    ).T.reshape(5, 2, 3)
    table = trajectory_crossings(series)
    assert list(table.kind) == list(TRAJECTORY_KINDS)
    assert list(table.crossings) == [0, 0, 1, 1, 2, 2]
    assert list(table.came_back) == [False, False, False, False, True, True]
    assert list(zip(table["layer"], table["head"])) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert table.start.tolist() == pytest.approx(series[0].flatten().tolist())
    # A plain loop over every head gives the same counts (random trajectories, many crossings).
    weights = torch.rand(12, 3, 4, generator=torch.Generator().manual_seed(1))
    table = trajectory_crossings(weights)
    for row in table.itertuples():
        inside = [bool(w >= 0.5) for w in weights[:, row.layer, row.head]]
        assert row.crossings == sum(a != b for a, b in itertools.pairwise(inside))
        assert row.came_back == (row.crossings > 0 and inside[0] == inside[-1])
    with pytest.raises(ValueError, match="weights must be"):
        trajectory_crossings(torch.rand(0, 3, 4))
    with pytest.raises(ValueError, match="threshold"):
        trajectory_crossings(weights, threshold=1.0)


def test_trajectory_table_and_crossing_counts_against_a_plain_loop():
    weights = torch.rand(3, 2, 4, generator=torch.Generator().manual_seed(2))
    table = trajectory_table([5, 10, 15], weights)
    rows = [(s, l, h) for s in [5, 10, 15] for l in range(2) for h in range(4)]
    assert list(zip(table.step, table.layer, table["head"])) == rows
    expected = [float(weights[i, l, h]) for i in range(3) for l in range(2) for h in range(4)]
    assert table.weight.tolist() == pytest.approx(expected)  # a flat list: pytest 9 refuses nested data
    with pytest.raises(ValueError, match="len\\(steps\\)"):
        trajectory_table([5, 10], weights)
    crossings = trajectory_crossings(weights)
    counts = crossing_counts(crossings)
    assert list(counts) == [*TRAJECTORY_KINDS, "crossed and came back"]
    assert sum(counts[kind] for kind in TRAJECTORY_KINDS) == 8
    assert counts["crossed and came back"] == int(crossings.came_back.sum())
    assert all(counts[kind] == (crossings.kind == kind).sum() for kind in TRAJECTORY_KINDS)


def test_pathway_recovery_against_hand_counts():
    mask = HeadMask.from_heads([(0, 0), (0, 1), (1, 2)], (2, 4))
    recovery = pathway_recovery(mask, [(0, 1), (1, 2), (1, 3)])
    assert recovery["jaccard_vs_planted"] == pytest.approx(2 / 4)
    assert recovery["jaccard_random_expectation"] == pytest.approx(random_jaccard(3, 3, 8))
