"""Output sets: one command never replaces another command's files, and the manifest reader is strict."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from headsup_lens._formats import FileFormatError
from headsup_lens._io import (
    RUN_RECORD,
    STAGING_NAME,
    OutputSet,
    claimed_folder,
    locked_folder,
    read_manifest,
    read_run_record,
    read_table,
)


def write_set(folder: Path, name: str, files: dict[str, str], **options) -> list[Path]:
    with locked_folder(folder):
        stage = OutputSet(folder, name, **options)
        for file, text in files.items():
            (stage.path / file).parent.mkdir(parents=True, exist_ok=True)
            (stage.path / file).write_text(text)
        return stage.commit()


def visible(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


def test_a_set_never_replaces_a_file_that_another_commands_set_lists(tmp_path):
    write_set(tmp_path, "evaluate", {"results.csv": "a\n", "generations.csv": "evaluate's\n"})
    before = visible(tmp_path)
    with pytest.raises(
        ValueError, match=r"out_dir .* holds generations.csv written by `evaluate` .*\.headsup-evaluate"
    ):
        write_set(tmp_path, "sweep", {"ranks.csv": "r\n", "generations.csv": "sweep's\n"})
    assert visible(tmp_path) == before  # nothing of the refused set was moved in
    assert not (tmp_path / STAGING_NAME).exists() and not (tmp_path / ".headsup-sweep.json").exists()
    # Asked up front (the names a command knows before its work), the same refusal comes first.
    with locked_folder(tmp_path), pytest.raises(ValueError, match="--out .* holds generations.csv"):
        OutputSet(tmp_path, "sweep", option="--out", files=["generations.csv"])


def test_the_same_bytes_may_be_shared_and_a_command_replaces_its_own_files(tmp_path):
    write_set(tmp_path, "lens", {"lens.csv": "1\n", "plotly.min.js": "js"})
    write_set(tmp_path, "similarity", {"similarity.csv": "2\n", "plotly.min.js": "js"})  # the same library file
    write_set(tmp_path, "lens", {"lens.csv": "3\n"})  # its own file again; the shared one is not its to remove
    assert visible(tmp_path) == {"lens.csv": "3\n", "similarity.csv": "2\n", "plotly.min.js": "js"}
    # Sets of one owner (the reproduction scripts, each named by its outputs) share their files.
    write_set(tmp_path, "fig2-0123456789", {"fig2.csv": "x\n"}, owner="reproduce")
    write_set(tmp_path, "fig2-abcdefabcd", {"fig2.csv": "y\n"}, owner="reproduce")
    assert visible(tmp_path)["fig2.csv"] == "y\n"


def test_a_manifest_of_an_older_version_still_claims_its_files(tmp_path):
    (tmp_path / "generations.csv").write_text("evaluate's\n")
    (tmp_path / ".headsup-evaluate.json").write_text(json.dumps({"files": ["generations.csv"]}))
    with pytest.raises(ValueError, match="written by `evaluate`"):
        write_set(tmp_path, "sweep", {"generations.csv": "sweep's\n"})
    assert read_manifest(tmp_path / ".headsup-evaluate.json") == {"owner": "evaluate", "files": ["generations.csv"]}
    (tmp_path / ".headsup-fig2-0123456789.json").write_text(json.dumps({"files": []}))
    assert read_manifest(tmp_path / ".headsup-fig2-0123456789.json")["owner"] == "reproduce"


@pytest.mark.parametrize(
    "text",
    ["[]", "{}", '{"files": "a.csv"}', '{"files": [1]}', '{"files": ["../x"]}', '{"files": ["/etc/x"]}', "{", "\xff"],
)
def test_a_damaged_manifest_is_named_not_trusted(tmp_path, text):
    (tmp_path / ".headsup-evaluate.json").write_text(text)
    with pytest.raises(FileFormatError, match=r"output set manifest .*\.headsup-evaluate\.json"):
        write_set(tmp_path, "sweep", {"ranks.csv": "r\n"})
    assert not (tmp_path / "ranks.csv").exists()


def test_a_file_that_no_set_lists_is_the_users_and_is_never_replaced(tmp_path):
    """In a folder a command claimed (its run record); a library call's folder without one adopts."""
    (tmp_path / "lens.csv").write_text("mine\n")
    with claimed_folder(tmp_path, "lens", {}):
        pass
    with locked_folder(tmp_path), pytest.raises(ValueError, match="--out .* holds lens.csv, which no headsup command"):
        OutputSet(tmp_path, "lens", option="--out", files=["lens.csv"])  # refused before any work
    with pytest.raises(ValueError, match="holds lens.csv, which no headsup command wrote there"):
        write_set(tmp_path, "lens", {"lens.csv": "1\n", "lens_resid.html": "<html>"})  # and at commit
    assert visible(tmp_path) == {"lens.csv": "mine\n"}  # nothing of the refused set was moved in
    write_set(tmp_path, "lens", {"lens.csv": "mine\n"})  # the same bytes replace nothing
    write_set(tmp_path, "lens", {"lens.csv": "2\n"})  # now listed by its own set: replaced
    assert visible(tmp_path) == {"lens.csv": "2\n"}
    # A folder whose files predate the manifests (the reproduction scripts' figures) adopts them.
    (tmp_path / "fig2.csv").write_text("older\n")
    write_set(tmp_path, "fig2-0123456789", {"fig2.csv": "new\n"}, owner="reproduce", adopt=True)
    assert visible(tmp_path)["fig2.csv"] == "new\n"
    unclaimed = tmp_path / "library"
    unclaimed.mkdir()
    (unclaimed / "results.csv").write_text("older\n")
    write_set(unclaimed, "evaluate", {"results.csv": "new\n"})  # no run record: as before manifests
    assert visible(unclaimed)["results.csv"] == "new\n"


@pytest.mark.parametrize(
    "text", ["[]", "3", '"lens"', "{", '{"command": 3}', '{"command": "lens", "recipe": []}', "\xff"]
)
def test_a_damaged_run_record_is_named_and_fresh_moves_it_aside(tmp_path, text):
    out = tmp_path / "out"
    out.mkdir()
    (out / RUN_RECORD).write_text(text, encoding="latin-1")
    with (
        pytest.raises(FileFormatError, match=r"run record .*\.headsup\.json.*: .*delete it"),
        claimed_folder(out, "lens", {"prompt": "farm"}),
    ):
        pass
    assert (out / RUN_RECORD).read_bytes() == text.encode("latin-1")  # refused, nothing changed
    with claimed_folder(out, "lens", {"prompt": "farm"}, fresh=True) as moved:
        pass
    assert moved is not None and (moved / RUN_RECORD).read_bytes() == text.encode("latin-1")
    assert read_run_record(out) == {"command": "lens", "recipe": {"prompt": "farm"}}


# ----------------------------------------------------------------------------------- properties
names = st.text(st.sampled_from("abc./_-"), min_size=1, max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _read(data: bytes) -> dict | None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ".headsup-x.json"
        path.write_bytes(data)
        try:
            return read_manifest(path)
        except FileFormatError:
            return None


@given(st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_read_as_a_manifest_or_a_file_format_error(data):
    manifest = _read(data)  # never a KeyError, TypeError, AttributeError, ...
    if manifest is not None:
        assert isinstance(manifest["owner"], str) and manifest["owner"]
        for name in manifest["files"]:
            assert isinstance(name, str) and all(part not in ("", ".", "..") for part in name.split("/"))


@given(st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_read_as_a_run_record_or_a_file_format_error(data):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / RUN_RECORD).write_bytes(data)
        try:
            record = read_run_record(folder)  # never a KeyError, TypeError, AttributeError, ...
        except FileFormatError as error:
            assert RUN_RECORD in str(error) and "\n" not in str(error)
            return
    assert isinstance(record["command"], str) and isinstance(record.get("recipe", {}), dict)


@given(st.lists(names, max_size=5), st.text(min_size=1, max_size=6) | st.none())
def test_a_written_manifest_reads_back_or_names_its_bad_path(files, owner):
    manifest = _read(json.dumps({"files": files, "owner": owner}).encode())
    inside = all(part not in ("", ".", "..") for f in files for part in f.split("/"))
    assert (manifest is not None) == inside
    if manifest is not None:
        assert manifest == {"files": files, "owner": owner if owner is not None else "x"}


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=20))
@example([3.9135956898331643])  # pandas 2's default parser reads 3.913595689833164
def test_a_table_reads_back_the_floats_that_to_csv_wrote_exactly(values):
    """What a resumed run reads from its CSV equals what the first run held in memory."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.csv"
        pd.DataFrame({"loss": values}).to_csv(path, index=False)
        assert read_table(path).loss.tolist() == values
