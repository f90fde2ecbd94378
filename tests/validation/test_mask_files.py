"""Mask files: bad output paths write nothing; broken files are named; the same mask gives the same bytes."""

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from headsup_lens import HeadMask
from headsup_lens.masks._files import write_safetensors
from headsup_lens.models import ModelFingerprint

from .refusal import assert_refused

FP = ModelFingerprint("LlamaForCausalLM", 2, 4, 8, 66, "tiny", content_hash="sha256:" + "a" * 64)


def a_mask() -> HeadMask:
    logits = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    return HeadMask.from_logits(logits, FP, task="antonym", steps=300, seed=0, gate="value", init_mean=4.0)


def good_file(folder: Path) -> Path:
    return a_mask().save(folder / "good.safetensors")


def header_of(data: bytes) -> dict:
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length])


def with_header(data: bytes, header: dict | bytes) -> bytes:
    """`data` with its JSON header replaced (tensor bytes kept)."""
    length = int.from_bytes(data[:8], "little")
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data[8 + length :]


# ------------------------------------------------------------------ saving into bad places
def test_save_into_a_path_under_a_file(tmp_path):
    (tmp_path / "taken").write_text("a file")
    assert_refused(
        lambda: a_mask().save(tmp_path / "taken" / "mask.safetensors"),
        ValueError,
        "taken",
        "is a file, not a folder",
        folder=tmp_path,
    )


def test_save_onto_a_folder(tmp_path):
    (tmp_path / "mask.safetensors").mkdir()
    assert_refused(
        lambda: a_mask().save(tmp_path / "mask.safetensors"),
        ValueError,
        "mask.safetensors",
        "is a folder",
        folder=tmp_path,
    )


def test_save_into_an_unwritable_folder_leaves_the_old_file(tmp_path, monkeypatch):
    good_file(tmp_path)

    def refuse(*args, **kwargs):  # what a read-only filesystem does to the write probe
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    other = HeadMask(torch.zeros(2, 4), model=FP)
    assert_refused(
        lambda: other.save(tmp_path / "good.safetensors"), ValueError, str(tmp_path), "not writable", folder=tmp_path
    )


# ------------------------------------------------------------------ reading broken files
def damaged(kind: str, folder: Path) -> Path:
    data = good_file(folder).read_bytes()
    header = header_of(data)
    broken = {
        "empty": b"",
        "short": data[:5],
        "header-cut": data[:40],
        "data-cut": data[:-7],
        "json": with_header(data, b'{"__metadata__": {"format": "headsup_lens.HeadMask",'),
        "model-json": with_header(data, {**header, "__metadata__": {**header["__metadata__"], "model": "{'name': 1"}}),
        "metadata-json": with_header(data, {**header, "__metadata__": {**header["__metadata__"], "metadata": "[1,"}}),
        "offsets": with_header(data, {**header, "values": {**header["values"], "data_offsets": [0, 8]}}),
        "foreign": with_header(data, {k: v for k, v in header.items() if k != "__metadata__"}),
    }[kind]
    path = folder / f"{kind}.safetensors"
    path.write_bytes(broken)
    return path


@pytest.mark.parametrize(
    "kind, fragments",
    [
        ("empty", ("truncated", "0 bytes")),
        ("short", ("truncated", "5 bytes")),
        ("header-cut", ("truncated", "header claims")),
        ("data-cut", ("truncated", "tensors need")),
        ("json", ("malformed JSON header",)),
        ("model-json", ("malformed JSON", "'model'")),
        ("metadata-json", ("malformed JSON", "'metadata'")),
        ("offsets", ("corrupted",)),
        ("foreign", ("not a headsup_lens HeadMask file",)),
    ],
)
def test_broken_files_are_named(tmp_path, kind, fragments):
    path = damaged(kind, tmp_path)
    assert_refused(lambda: HeadMask.load(path), ValueError, str(path), *fragments, folder=tmp_path)


@pytest.mark.filterwarnings("ignore::headsup_lens.masks.UnverifiedMaskWarning")  # written with no checksum
def test_invalid_values_in_a_file_are_named(tmp_path):
    path = tmp_path / "range.safetensors"
    write_safetensors(path, {"values": torch.full((2, 4), 3.0)}, {"format": "headsup_lens.HeadMask", "version": "1"})
    assert_refused(
        lambda: HeadMask.load(path), ValueError, str(path), "invalid mask", "[0, 1]", "3 at (0, 0)", folder=tmp_path
    )


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_missing_file_or_folder(tmp_path, kind):
    path = tmp_path / "mask.safetensors"
    if kind == "folder":
        path.mkdir()
    fragments = ("no mask file",) if kind == "missing" else ("is a folder",)
    assert_refused(lambda: HeadMask.load(path), ValueError, str(path), *fragments, folder=tmp_path)


def test_a_mask_for_other_weights_is_refused_on_load(tmp_path):
    path = good_file(tmp_path)
    twin = replace(FP, name="tiny-instruct", content_hash="sha256:" + "b" * 64)
    assert_refused(
        lambda: HeadMask.load(path, twin),
        ValueError,
        "other weights",
        "'tiny'",
        "'tiny-instruct'",
        "allow_other_weights=True",
        folder=tmp_path,
    )


# ------------------------------------------------------------------ reproducible bytes
def test_the_same_mask_saved_twice_gives_identical_bytes(tmp_path):
    first = a_mask().save(tmp_path / "a.safetensors").read_bytes()
    second = a_mask().save(tmp_path / "b.safetensors").read_bytes()
    assert first == second
    header = header_of(first)
    assert list(header) == sorted(header) and list(header["__metadata__"]) == sorted(header["__metadata__"])
    assert list(json.loads(header["__metadata__"]["metadata"])) == ["gate", "init_mean", "seed", "steps", "task"]


def test_repeated_saves_are_identical_although_the_writer_shuffles_metadata(tmp_path):
    # The safetensors writer keeps metadata in a randomly seeded hash map: its order changes from one
    # call to the next, in one process as across processes. Twenty saves would show it.
    mask = a_mask()
    assert len({mask.save(tmp_path / f"{i}.safetensors").read_bytes() for i in range(20)}) == 1


def test_files_record_no_absolute_local_path(tmp_path):
    local = replace(FP, name=str(tmp_path / "models" / "tiny-local"))
    data = HeadMask.full(local).save(tmp_path / "m.safetensors").read_bytes()
    assert str(tmp_path).encode() not in data
    assert HeadMask.load(tmp_path / "m.safetensors").model.name == "tiny-local"
