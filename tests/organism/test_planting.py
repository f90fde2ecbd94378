"""The planted sets S_t: disjoint, spread over layers, seeded, saved beside the weights."""

from __future__ import annotations

import pytest

from headsup_lens import HeadMask
from headsup_lens.organism import load_planted, plant_head_sets, planted_mask, save_planted


def test_sets_are_disjoint_spread_and_seeded():
    tasks = ["a", "b", "c", "d", "e", "f", "g", "h"]
    sets = plant_head_sets(tasks, n_layers=8, n_heads=16, size=12, seed=3)
    heads = [h for s in sets.values() for h in s]
    assert len(heads) == len(set(heads)) == 8 * 12
    assert all(0 <= l < 8 and 0 <= h < 16 for l, h in heads)
    assert all({l for l, _ in s} == set(range(8)) for s in sets.values())  # every layer is touched
    assert sets == plant_head_sets(tasks, 8, 16, 12, seed=3)
    assert sets != plant_head_sets(tasks, 8, 16, 12, seed=4)


def test_impossible_sizes_are_errors():
    with pytest.raises(ValueError, match="disjoint sets"):
        plant_head_sets(["a", "b"], n_layers=2, n_heads=4, size=5)
    with pytest.raises(ValueError, match="positive"):
        plant_head_sets(["a"], n_layers=2, n_heads=4, size=0)


def test_round_trip_and_mask(tmp_path):
    sets = plant_head_sets(["reverse", "plural"], n_layers=2, n_heads=4, size=3, seed=0)
    save_planted(tmp_path, sets, 2, 4, seed=0)
    assert load_planted(tmp_path) == sets
    mask = planted_mask(sets, "organism/reverse", (2, 4))
    assert isinstance(mask, HeadMask) and sorted(mask.removed_heads()) == sorted(sets["reverse"])
    with pytest.raises(ValueError, match="no planted set"):
        planted_mask(sets, "antonym", (2, 4))
    with pytest.raises(ValueError, match="planted.json"):
        load_planted(tmp_path / "missing")
