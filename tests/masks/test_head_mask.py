import math
from dataclasses import replace

import pytest
import torch

from headsup_lens import HeadMask, random_jaccard
from headsup_lens.masks import UnverifiedModelWarning
from headsup_lens.models import ModelFingerprint

FP = ModelFingerprint("LlamaForCausalLM", 2, 4, 8, 66, "tiny")


def mask_of(rows):
    return HeadMask(torch.tensor(rows, dtype=torch.float32))


def test_from_logits_thresholds_sigmoid_at_one_half():
    logits = torch.tensor([[-2.0, 0.0, 3.0, -0.1], [0.1, -5.0, 4.0, 1e-4]])
    mask = HeadMask.from_logits(logits, FP)
    assert mask.values.tolist() == [[0, 1, 1, 0], [1, 0, 1, 1]]
    assert mask.n_kept == 5 and mask.n_total == 8
    assert torch.allclose(mask.weights, torch.sigmoid(logits))


def test_shuffled_keeps_the_count_and_is_seeded():
    mask = HeadMask.from_logits(torch.randn(8, 16, generator=torch.Generator().manual_seed(0)))
    a, b, c = mask.shuffled(1), mask.shuffled(1), mask.shuffled(2)
    assert a.n_kept == mask.n_kept == c.n_kept
    assert torch.equal(a.values, b.values)
    assert not torch.equal(a.values, c.values)
    assert not torch.equal(a.values, mask.values)


def test_removal_order_is_ascending_weight_with_position_ties():
    logits = torch.tensor([[0.5, -1.0], [-1.0, 2.0]])
    assert HeadMask.from_logits(logits).removal_order() == [(0, 1), (1, 0), (0, 0), (1, 1)]
    assert HeadMask(torch.ones(2, 2)).removal_order() == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_jaccard_recall_and_expectation_by_hand():
    a = mask_of([[1, 1, 0, 0], [1, 0, 0, 0]])  # kept {0,1,4}
    b = mask_of([[1, 0, 1, 0], [1, 0, 0, 1]])  # kept {0,2,4,7}
    assert a.jaccard(b) == pytest.approx(2 / 5)
    assert a.recall(b) == pytest.approx(2 / 3)
    # E = (3*4/8) / (3 + 4 - 3*4/8) = 1.5 / 5.5
    assert a.expected_jaccard(b) == pytest.approx(1.5 / 5.5)
    assert random_jaccard(800, 820, 1024) == pytest.approx((800 * 820 / 1024) / (1620 - 800 * 820 / 1024))
    # The removed heads: a removes {2,3,5,6,7}, b removes {1,3,5,6}: 3 shared of 6.
    assert a.jaccard(b, heads="removed") == pytest.approx(3 / 6)
    assert a.expected_jaccard(b, heads="removed") == pytest.approx(random_jaccard(5, 4, 8))
    with pytest.raises(TypeError, match="heads"):
        a.jaccard(b, heads="both")


def test_removed_jaccard_is_pathway_recovery():
    """The organism reports compare removed heads: pathway_recovery equals jaccard(heads="removed")."""
    from headsup_lens.analysis import pathway_recovery

    a = mask_of([[1, 1, 0, 0], [1, 0, 0, 0]])
    b = mask_of([[1, 0, 1, 0], [1, 0, 0, 1]])
    recovery = pathway_recovery(a, b.removed_heads())
    assert recovery["jaccard_vs_planted"] == pytest.approx(a.jaccard(b, heads="removed"))
    assert recovery["jaccard_random_expectation"] == pytest.approx(a.expected_jaccard(b, heads="removed"))


def test_expected_jaccard_matches_simulation():
    generator = torch.Generator().manual_seed(0)
    n, ka, kb = 64, 20, 40
    draws = []
    for _ in range(4000):
        a = torch.zeros(n)
        a[torch.randperm(n, generator=generator)[:ka]] = 1
        b = torch.zeros(n)
        b[torch.randperm(n, generator=generator)[:kb]] = 1
        draws.append((a * b).sum() / ((a + b) > 0).sum())
    assert torch.stack(draws).mean().item() == pytest.approx(random_jaccard(ka, kb, n), rel=0.05)


def test_without_and_from_heads():
    mask = HeadMask.from_heads([(0, 1), (1, 3)], (2, 4))
    assert mask.removed_heads() == [(0, 1), (1, 3)]
    assert mask.without([(0, 0)]).n_kept == 5
    with pytest.raises(ValueError, match="outside"):
        mask.without([(2, 0)])


def test_save_load_round_trip_is_atomic(tmp_path):
    logits = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    mask = HeadMask.from_logits(logits, FP, task="antonym")
    path = mask.save(tmp_path / "mask")
    assert path.name == "mask.safetensors"
    assert [p.name for p in tmp_path.iterdir()] == ["mask.safetensors"]  # no temporary files left
    loaded = HeadMask.load(path, FP)
    assert torch.equal(loaded.values, mask.values) and torch.equal(loaded.logits, mask.logits)
    assert loaded.model == FP and loaded.metadata == {"task": "antonym"}


def test_loading_onto_another_model_is_a_clear_error(tmp_path):
    made_for = replace(FP, content_hash="sha256:" + "a" * 64)
    path = HeadMask.from_logits(torch.zeros(2, 4), made_for).save(tmp_path / "m.safetensors")
    renamed = replace(made_for, name="elsewhere/tiny-copy")
    assert HeadMask.load(path, renamed).n_kept == 8  # the name is informational only
    twin = replace(made_for, name="tiny-instruct", content_hash="sha256:" + "b" * 64)
    with pytest.raises(ValueError, match="made for other weights.*allow_other_weights=True"):
        HeadMask.load(path, twin)
    assert HeadMask.load(path, twin, allow_other_weights=True).n_kept == 8  # the swapped-mask baseline
    other = ModelFingerprint("GPT2LMHeadModel", 2, 4, 16, 66, "tiny")
    with pytest.raises(ValueError, match="architecture"):
        HeadMask.load(path, other, allow_other_weights=True)
    bigger = ModelFingerprint("LlamaForCausalLM", 4, 4, 8, 66, "tiny")
    with pytest.raises(ValueError, match="does not fit"):
        HeadMask.load(path, bigger)


def test_allow_other_name_still_means_allow_other_weights(tmp_path):
    path = HeadMask.full(replace(FP, content_hash="sha256:" + "a" * 64)).save(tmp_path / "m.safetensors")
    twin = replace(FP, content_hash="sha256:" + "b" * 64)
    with pytest.warns(DeprecationWarning):
        assert HeadMask.load(path, twin, allow_other_name=True).n_kept == 8


def test_a_mask_without_a_weights_hash_is_checked_on_structure_with_a_note(tmp_path):
    path = HeadMask.full(FP).save(tmp_path / "old.safetensors")  # as written before the hash existed
    with pytest.warns(UnverifiedModelWarning, match="no weights hash"):
        HeadMask.load(path, replace(FP, content_hash="sha256:" + "c" * 64))


def test_load_against_a_real_model(tmp_path, llama):
    path = HeadMask.full(llama).save(tmp_path / "full.safetensors")
    assert HeadMask.load(path, llama).model.n_heads == llama.cfg.n_heads


@pytest.mark.parametrize(
    "values, message",
    [
        (torch.ones(8), r"\[n_layers, n_heads\]"),
        (torch.full((2, 4), math.nan), "NaN"),
        (torch.full((2, 4), 2.0), r"\[0, 1\]"),
    ],
)
def test_bad_values_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        HeadMask(values)


def test_mask_that_does_not_match_its_fingerprint():
    with pytest.raises(ValueError, match="does not match its model"):
        HeadMask(torch.ones(3, 4), model=FP)


def test_nan_logits_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        HeadMask.from_logits(torch.tensor([[float("nan"), 0.0]]))


@pytest.mark.parametrize("content", [b"", b"not a safetensors file", b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "])
def test_corrupt_or_foreign_files_are_refused(tmp_path, content):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.safetensors"):
        HeadMask.load(path)
    with pytest.raises(ValueError, match="no mask file"):
        HeadMask.load(tmp_path / "missing.safetensors")


def test_removed_mlp_layers_are_the_ffn_slots_below_one_half():
    assert HeadMask(torch.ones(3, 2)).removed_mlp_layers() == []
    mask = HeadMask(torch.ones(3, 2), mlp_values=torch.tensor([1.0, 0.0, 1.0]))
    assert mask.removed_mlp_layers() == [1]


@pytest.mark.parametrize(
    "metadata, where",
    [
        ({0: 0.5}, "metadata"),
        ({"a": {0: 0.5}}, r"metadata\['a'\] keys"),
        ({"a": [1, {"b": {(0, 1): 2}}]}, r"metadata\['a'\]\[1\]\['b'\] keys"),
        ({"a": [1, {"b": {True: 2}}]}, r"metadata\['a'\]\[1\]\['b'\] keys"),
        ({"a": {"b": torch.ones(2)}}, r"metadata\['a'\]\['b'\] must be JSON"),
    ],
)
def test_metadata_that_json_would_change_is_refused_at_every_level(metadata, where):
    with pytest.raises(TypeError, match=where):
        HeadMask(torch.ones(2, 4), metadata=metadata)


def test_metadata_comes_back_from_a_file_exactly_as_the_mask_holds_it(tmp_path):
    mask = HeadMask(torch.ones(2, 4), metadata={"a": {"b": (1, 2), "c": [{"d": None}]}, "e": 1.5})
    assert mask.metadata == {"a": {"b": [1, 2], "c": [{"d": None}]}, "e": 1.5}  # a tuple is kept as the file's list
    assert HeadMask.load(mask.save(tmp_path / "m"), allow_missing_model=True).metadata == mask.metadata


def test_logits_that_disagree_with_the_values_are_refused_where_the_mask_is_made(tmp_path):
    logits = torch.tensor([[-2.0, 0.0, 3.0, -0.1], [0.1, -5.0, 4.0, 1e-4]])
    with pytest.raises(ValueError, match=r"8 of 8 values differ from 1\[sigmoid\(logits\) >= 0.5\].*values\[0, 0\]"):
        HeadMask(torch.sigmoid(logits), logits=logits)
    mask = HeadMask((logits >= 0).float(), logits=logits)  # what from_logits makes: saved, then loaded alike
    back = HeadMask.load(mask.save(tmp_path / "m"), allow_missing_model=True)
    assert torch.equal(back.values, mask.values) and torch.equal(back.logits, logits)


@pytest.mark.parametrize("version", ["99", "2", "0", "", None])
def test_a_mask_file_of_another_format_version_is_refused(tmp_path, version):
    from headsup_lens.masks._files import content_checksum, read_safetensors, write_safetensors

    tensors, header = read_safetensors(HeadMask.full(FP).save(tmp_path / "m.safetensors"))
    if version is None:
        del header["version"]
    else:
        header["version"] = version
    header["checksum"] = content_checksum(tensors, header)
    path = write_safetensors(tmp_path / "other.safetensors", tensors, header)
    with pytest.raises(ValueError, match=f"other.safetensors' has format version {version!r}.*reads version 1 only"):
        HeadMask.load(path)
