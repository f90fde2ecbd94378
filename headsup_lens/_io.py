"""Safe writes: a crash never leaves a half-written result behind, two processes never mix theirs.

- `atomic_write`: one file, written beside its target and renamed into place.
- `FolderLock` / `locked_folder`: one writer per output folder. The lock is a `filelock` lock on
  `<folder>/.headsup.lock` (an `flock` on POSIX), whose file also names the holder (pid, host,
  command, start time) for the refusal message. The operating system drops the lock of a killed
  process, so a stale lock file is simply taken over (with a note naming the process that left it).
- `OutputSet`: a command's files go to `<folder>/.headsup-staging/` and `commit()` moves them in as
  one set: a journal (`commit.json`) is written first, so a command killed during the renames is
  completed by the next command that takes the folder's lock; one killed before leaves the old set.
  Each set's manifest (`.headsup-<name>.json`) lists its files and its owner (the command): a set
  never replaces a file that another owner's set lists, unless with the same bytes (a shared
  `plotly.min.js`); that is refused, naming the files and the owner, and nothing is moved in.
- Taking a folder's lock first removes what killed writers left there (`.*.tmp` files, an
  unfinished staging folder).
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from ._formats import FileFormatError, read_json

if TYPE_CHECKING:
    import pandas as pd

LOCK_NAME = ".headsup.lock"
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # atomic_write's `.<name>.<mkstemp's 8 characters>.tmp`
STAGING_NAME = ".headsup-staging"
_JOURNAL = "commit.json"
MANIFEST = re.compile(r"^\.headsup-(?P<name>.+)\.json$")  # `.headsup-<set name>.json`
_LEGACY_EXPERIMENT = re.compile(r"^(?P<script>.+)-[0-9a-f]{10}$")  # a reproduction set before owners were recorded
REPRODUCE = "reproduce"  # the owner of the reproduction scripts' sets, which share one folder by design


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Call `write(tmp_path)` on a temporary file beside `path`, then rename it into place.

    An OSError (e.g. "No space left on device") names `path`, not the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        if error.errno is not None and error.filename in (None, tmp):
            raise OSError(error.errno, error.strerror or str(error), str(path)) from error
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def read_table(path: str | os.PathLike | io.TextIOBase, **options: Any) -> pd.DataFrame:
    """`pd.read_csv(path, **options)` of a table written by `DataFrame.to_csv`, its floats read back
    exactly as written, so a resumed run returns the same numbers as the run that wrote them. Before
    3.1, pandas' default float parser gets the last bit of some wrong (3.9135956898331643 comes back
    as 3.913595689833164) and `float_precision="round_trip"` reads them exactly; 3.1 reads them
    exactly by default and deprecates that option. A file that pandas cannot parse (a truncated or
    corrupt table, no header, not UTF-8) is a `FileFormatError` naming it."""
    import pandas as pd  # here, not above: modules that never read a table load without pandas

    major, minor = (int(part) for part in re.findall(r"\d+", pd.__version__)[:2])
    exact = {} if (major, minor) >= (3, 1) else {"float_precision": "round_trip"}
    if isinstance(path, (str, os.PathLike)):
        path = stored_table(path)
    try:
        return pd.read_csv(path, **exact, **options)
    except (
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        EOFError,
        zlib.error,
        gzip.BadGzipFile,
    ) as error:
        if not isinstance(path, (str, os.PathLike)):
            raise
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise FileFormatError("table", path, "", f"cannot be read as CSV ({reason}); restore or delete it") from error


def stored_table(path: str | os.PathLike) -> Path:
    """`path` (a `.csv`) as it is stored: the file itself, else its gzipped twin `<path>.gz` (long
    tables of every output are committed compressed; pandas reads either), else `path`."""
    path = Path(path)
    zipped = path.with_name(path.name + ".gz")
    return zipped if not path.exists() and zipped.exists() else path


def find_table(folder: Path, *stems: str) -> Path | None:
    """The first of `<stem>.csv` or `<stem>.csv.gz` in `folder` that is a file, stem by stem; None if none."""
    for stem in stems:
        for suffix in (".csv", ".csv.gz"):
            if (folder / f"{stem}{suffix}").is_file():
                return folder / f"{stem}{suffix}"
    return None


# ----------------------------------------------------------------------------------------- locks
class FolderInUse(ValueError):
    """Another process holds the output folder's lock; the message names it."""


_HELD: dict[str, FileLock] = {}  # real path of a folder -> this process's lock on it (taken again = counted)
if hasattr(os, "register_at_fork"):  # a forked child holds none of its parent's locks
    os.register_at_fork(after_in_child=_HELD.clear)


def _command_line() -> str:
    words = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
    text = " ".join(words)
    return text if len(text) <= 200 else text[:197] + "..."


def _describe(holder: dict) -> str:
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (`{holder.get('command', '?')}`, "
        f"started {holder.get('started', '?')})"
    )


def _parse_holder(data: bytes) -> dict:
    try:
        holder = json.loads(data.decode("utf-8", "replace").strip() or "{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


class FolderLock:
    """The exclusive lock of one output folder (see the module docstring); use `locked_folder`."""

    def __init__(self, folder: str | os.PathLike, option: str = "out_dir") -> None:
        self.folder = Path(folder).expanduser()
        self.option = option
        self.path = self.folder / LOCK_NAME
        self._key = ""
        self._created: list[Path] = []  # folders this lock made, deepest first

    def acquire(self) -> FolderLock:
        self._key = os.path.realpath(self.folder)
        held = _HELD.get(self._key)
        if held is not None:  # the same process again (the CLI and the library both lock a run folder)
            held.acquire()
            return self
        missing = self.folder
        while not missing.exists() and missing.parent != missing:
            self._created.append(missing)
            missing = missing.parent
        self.folder.mkdir(parents=True, exist_ok=True)
        previous: list[dict] = []
        before = _record_before(self.path)
        lock = FileLock(
            self.path, blocking=False, thread_local=False, on_acquired=lambda fd: previous.append(_take(fd, before))
        )
        try:
            lock.acquire()
        except Timeout:
            try:
                holder = _parse_holder(self.path.read_bytes())
            except OSError:  # removed meanwhile, or unreadable while locked (Windows)
                holder = {}
            raise FolderInUse(
                f"{self.option} {self.folder} is in use by {_describe(holder)}; wait for it to "
                f"finish or choose another {self.option}"
            ) from None
        except OSError as error:  # a file system without flock (some network mounts): go unlocked
            if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        if previous and previous[0]:  # the kernel dropped a killed process's lock; its record stayed
            print(  # noqa: T201 (a note for the user on stderr)
                f"headsup_lens: {self.folder}: taking over the lock left by {_describe(previous[0])}, "
                "which no longer runs",
                file=sys.stderr,
            )
        _HELD[self._key] = lock
        recover(self.folder)
        return self

    def release(self) -> None:
        lock = _HELD.get(self._key)
        if lock is None:
            return
        if lock.lock_counter > 1:
            lock.release()
            return
        try:
            recover(self.folder)  # an output set that was not committed is dropped
            self.path.unlink(missing_ok=True)  # while still locked: nobody can hold the removed file
        except OSError:
            pass  # tidied by the next command instead
        finally:
            lock.release()
            del _HELD[self._key]
        for folder in self._created:  # a command that failed before writing anything leaves no folder
            try:
                folder.rmdir()
            except OSError:
                break

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _record_before(path: Path) -> tuple[int, bytes] | None:
    """The lock file's inode and record before locking: filelock 4 empties the file as it locks."""
    try:
        with open(path, "rb") as file:
            return os.fstat(file.fileno()).st_ino, file.read(4096)
    except OSError:
        return None


def _take(fd: int, before: tuple[int, bytes] | None) -> dict:
    """Record this process as the holder in the lock file `fd` (just locked); the holder recorded
    there before, if any (a killed process). `before` is the record read before locking, used when
    the lock emptied the same file (a file of another inode was made anew by a clean release)."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, 4096)
    if not data and before is not None and before[0] == os.fstat(fd).st_ino:
        data = before[1]
    previous = _parse_holder(data)
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": _command_line(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(me) + "\n").encode())
    same = (previous.get("pid"), previous.get("host")) == (me["pid"], me["host"])
    return {} if same else previous


@contextmanager
def locked_folder(folder: str | os.PathLike, option: str = "out_dir") -> Iterator[Path]:
    """Hold `folder`'s lock for the block (created if needed); another process holding it is a
    `FolderInUse` error naming that process. `option` names the argument in messages."""
    lock = FolderLock(folder, option).acquire()
    try:
        yield lock.folder
    finally:
        lock.release()


# ----------------------------------------------------------------------------------- output sets
class OutputSet:
    """The files one command writes into `folder`, moved in together by `commit()`.

    Write them under `.path` (the staging folder, same relative names). Until `commit()` the folder
    holds the previous set unchanged; files that the command's previous set had and this one has
    not are removed at commit, so no set mixes with an older one. Take the folder's lock first.

    `owner` (default: `name`) is the command the set belongs to: a file listed by a set of another
    owner is never replaced with other bytes (`check_unclaimed`; `files` names those known up front,
    checked here before any work, and `commit()` checks every staged file). Nor, in a folder that a
    command claimed (`claimed_folder`: it has a run record), is a file that no set of the folder lists
    (the user's own `lens.csv`); `adopt` (default: when the folder has no run record, such as the
    reproduction scripts' folders, whose files predate the manifests, or a library call's folder)
    takes such files over. `option` names the folder in messages (`--out` for the command line).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        name: str,
        *,
        owner: str | None = None,
        option: str = "out_dir",
        files: tuple[str, ...] | list[str] = (),
        adopt: bool | None = None,
    ) -> None:
        self.folder = Path(folder).expanduser()
        self.name = name
        self.owner = owner or name
        self.option = option
        # A folder claimed by a command (it has a run record) lists every file headsup wrote there.
        self.adopt = not (self.folder / RUN_RECORD).is_file() if adopt is None else adopt
        self.path = self.folder / STAGING_NAME
        check_unclaimed(self.folder, self.owner, files, option, adopt=self.adopt)
        recover(self.folder)
        self.path.mkdir(parents=True)

    def commit(self) -> list[Path]:
        """Move the staged files into place; the paths written."""
        files = sorted(p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file())
        files = [f for f in files if f != _JOURNAL]
        check_unclaimed(self.folder, self.owner, files, self.option, staged=self.path, adopt=self.adopt)
        manifest = self.folder / f".headsup-{self.name}.json"
        previous = read_manifest(manifest)["files"] if manifest.is_file() else []
        kept = set(_claims(self.folder, self.owner))  # another owner's file stays where it is
        journal = {
            "name": self.name,
            "owner": self.owner,
            "files": files,
            "remove": [f for f in previous if f not in files and f not in kept],
        }
        atomic_write_json(self.path / _JOURNAL, journal)
        _finish(self.folder)
        return [self.folder / f for f in files]


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """An output set's manifest: `{"owner": str, "files": [relative paths]}`. A file that is not
    such a JSON object (a path that is absolute, climbs out with `..` or names no file included) is a
    `FileFormatError` naming it; a manifest of an older version without `owner` belongs to its set."""
    path = Path(path)
    what = "output set manifest"
    data = read_json(path, what)
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise FileFormatError(what, path, "", 'is not a JSON object with a "files" list; delete it to start afresh')
    for name in data["files"]:
        if not _inside(name):
            raise FileFormatError(what, path, '"files"', f"{name!r} is not a path inside the folder")
    owner = data.get("owner")
    if owner is None:
        match = MANIFEST.match(path.name)
        set_name = match.group("name") if match else path.stem
        owner = REPRODUCE if _LEGACY_EXPERIMENT.match(set_name) else set_name
    if not isinstance(owner, str) or not owner:
        raise FileFormatError(what, path, '"owner"', f"{owner!r} is not a command name")
    return {"owner": owner, "files": list(data["files"])}


def _inside(name: object) -> bool:
    """A relative path of a file inside the folder: parts that are neither empty, `.` nor `..`."""
    return isinstance(name, str) and all(part not in ("", ".", "..") for part in name.split("/"))


def _claims(folder: Path, owner: str | None) -> dict[str, tuple[str, str]]:
    """The files that the output sets of owners other than `owner` list: name -> (owner, manifest)
    (every owner's with `owner` None)."""
    claims: dict[str, tuple[str, str]] = {}
    if not folder.is_dir():
        return claims
    for path in sorted(folder.iterdir()):
        if MANIFEST.match(path.name) and path.is_file():
            manifest = read_manifest(path)
            if manifest["owner"] != owner:
                for name in manifest["files"]:
                    claims.setdefault(name, (manifest["owner"], path.name))
    return claims


def check_unclaimed(
    folder: str | os.PathLike,
    owner: str,
    files: tuple[str, ...] | list[str],
    option: str = "out_dir",
    staged: Path | None = None,
    adopt: bool = False,
) -> None:
    """Refuse to replace files of `folder` that another owner's output set lists, or (unless `adopt`)
    that no output set lists: a file of the user's (with `staged`, the staging folder: unless the
    staged file has the same bytes). A ValueError names them."""
    folder = Path(folder)
    listed = _claims(folder, None)
    claims = {name: by for name, by in listed.items() if by[0] != owner}
    taken, unlisted = [], []
    for name in files:
        target = folder / name
        if not target.is_file() or (name in listed and name not in claims):
            continue
        if name not in claims and adopt:
            continue
        if staged is not None and _same_bytes(staged / name, target):
            continue
        (taken if name in claims else unlisted).append(name)
    if taken:
        by = sorted({claims[name] for name in taken})
        listed_by = ", ".join(f"`{who}` (listed in {manifest})" for who, manifest in by)
        raise ValueError(
            f"{option} {folder} holds {', '.join(taken[:5])}{' ...' if len(taken) > 5 else ''} written by {listed_by}; "
            f"this {owner} would replace them: choose another {option}, or remove those files and the list first"
        )
    if unlisted:
        raise ValueError(
            f"{option} {folder} holds {', '.join(unlisted[:5])}{' ...' if len(unlisted) > 5 else ''}, which no "
            f"headsup command wrote there (no output list names it); this {owner} would replace it: choose "
            f"another {option}, or move the file away first"
        )


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        if a.stat().st_size != b.stat().st_size:
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _read_json(path: Path) -> dict:
    """A JSON object written by this module, `{}` when it is missing, damaged or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _finish(folder: Path) -> None:
    """Carry out a staging folder's journal (again, after a kill: every step can be repeated)."""
    staging = folder / STAGING_NAME
    journal = _read_json(staging / _JOURNAL)
    for name in journal.get("files", []):
        source, target = staging / name, folder / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
    for name in journal.get("remove", []):
        (folder / name).unlink(missing_ok=True)
    manifest = {"owner": journal.get("owner", journal["name"]), "files": journal.get("files", [])}
    atomic_write_json(folder / f".headsup-{journal['name']}.json", manifest)
    shutil.rmtree(staging, ignore_errors=True)


def recover(folder: str | os.PathLike) -> None:
    """Tidy what a killed writer left in `folder`: complete a committed output set, drop an
    uncommitted one, remove temporary files. Call it only while holding the folder's lock."""
    folder = Path(folder)
    staging = folder / STAGING_NAME
    if (staging / _JOURNAL).is_file() and _read_json(staging / _JOURNAL).get("name"):
        _finish(folder)
    elif staging.exists():
        shutil.rmtree(staging, ignore_errors=True)
    remove_leftovers(folder)


def remove_leftovers(folder: str | os.PathLike, depth: int = 2) -> list[Path]:
    """Delete temporary files of killed writers in `folder` and its sub-folders `depth` levels down
    (not hidden ones, nor those with a lock of their own, tidied when they are locked); the files removed."""
    removed = []
    top = len(Path(folder).parts)
    for root, dirs, names in os.walk(folder):
        for name in [d for d in dirs if d.startswith(".saving-")]:  # scratch folders of older versions
            shutil.rmtree(Path(root, name), ignore_errors=True)
        deep = len(Path(root).parts) - top >= depth
        dirs[:] = (
            [] if deep else [d for d in dirs if not d.startswith(".") and not (Path(root, d) / LOCK_NAME).exists()]
        )
        for name in names:
            if _TEMPORARY.match(name):
                path = Path(root, name)
                try:
                    path.unlink()
                    removed.append(path)
                except OSError:
                    pass
    return removed


# ------------------------------------------------------------------------- what a folder holds
RUN_RECORD = ".headsup.json"  # the command whose results a folder holds, and their recipe


class FolderHoldsOther(ValueError):
    """An output folder holds another command's results, or the same command's for another recipe."""


def folder_holds(
    folder: str | os.PathLike, signatures: dict[str, tuple[str, ...]], recipes: dict[str, str] | None = None
) -> tuple[str, dict | None] | None:
    """`(command, recipe)` of the results `folder` holds, or None when it holds none (it does not exist,
    is empty, or holds no file a command writes). Read from its run record (`RUN_RECORD`); for a folder
    written before run records existed, from the owners of its output sets' manifests or the files a
    command leaves there (`signatures`: command -> names of files or folders only it writes), the
    recipe then read from the file that command recorded it in (`recipes`: command -> file name), or
    unknown (None)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    record = read_run_record(folder)
    if isinstance(record.get("command"), str):
        recipe = record.get("recipe")
        return record["command"], recipe if isinstance(recipe, dict) else None
    owners = set()
    for path in folder.iterdir():
        if MANIFEST.match(path.name) and path.is_file():
            try:
                owners.add(read_manifest(path)["owner"])
            except FileFormatError:
                continue
    owners |= {command for command, names in signatures.items() if any((folder / name).exists() for name in names)}
    if not owners:
        return None
    owner = sorted(owners)[0]
    recorded = _read_json(folder / (recipes or {})[owner]) if owner in (recipes or {}) else {}
    return owner, recorded or None


def read_run_record(folder: str | os.PathLike) -> dict:
    """The run record of `folder` (`RUN_RECORD`), `{}` when there is none; one that is not a JSON
    object with a "command" name and a "recipe" object (`[]`, a half-written file) is a
    `FileFormatError` naming it and the way out."""
    path = Path(folder) / RUN_RECORD
    if not path.is_file():
        return {}
    fix = "delete it (or add --fresh to move the folder's contents aside) to start afresh"
    try:
        record = read_json(path, "run record")
    except FileFormatError as error:
        raise FileFormatError("run record", path, "", f"{error.problem}; {fix}") from None
    if not isinstance(record, dict):
        raise FileFormatError("run record", path, "", f"is not a JSON object (found {type(record).__name__}); {fix}")
    if not isinstance(record.get("command"), str) or not isinstance(record.get("recipe", {}), dict):
        raise FileFormatError("run record", path, "", f'is not an object with a "command" and its "recipe"; {fix}')
    return record


def recipe_differences(there: dict, here: dict) -> list[str]:
    """The fields in which two recipes differ, readable: `task ('antonym' there, 'organism/reverse'
    here)`; a nested recipe's fields are named by their path (`evaluation.alpha`)."""
    there, here = _flat(there), _flat(here)
    return [
        f"{key} ({there.get(key)!r} there, {here.get(key)!r} here)"
        for key in sorted(set(there) | set(here))
        if there.get(key) != here.get(key)
    ]


def _flat(recipe: dict, prefix: str = "") -> dict:
    flat: dict = {}
    for key, value in recipe.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _summary(recipe: dict) -> str:
    """What a recorded recipe is about, in a few words: its model, task(s), prompt and mask."""
    shown = [f"{key} {recipe[key]!r}" for key in ("task", "tasks", "model", "prompt", "mask") if recipe.get(key)]
    return ", ".join(shown)


def move_aside(folder: str | os.PathLike) -> Path | None:
    """Move `folder`'s contents to `<folder>.old-<YYYYmmdd-HHMMSS>` (nothing is deleted) so that a fresh
    run never mixes with them; the lock file stays. None when there was nothing to move."""
    folder = Path(folder)
    if not folder.is_dir() or not any(p.name != LOCK_NAME for p in folder.iterdir()):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = folder.with_name(f"{folder.name}.old-{stamp}")
    counter = 1
    while target.exists():
        target = folder.with_name(f"{folder.name}.old-{stamp}-{counter}")
        counter += 1
    target.mkdir()
    for item in folder.iterdir():
        if item.name != LOCK_NAME:  # the lock the caller holds stays with the folder
            item.rename(target / item.name)
    return target


@contextmanager
def claimed_folder(
    folder: str | os.PathLike,
    command: str,
    recipe: dict,
    *,
    fresh: bool = False,
    signatures: dict[str, tuple[str, ...]] | None = None,
    recipes: dict[str, str] | None = None,
    option: str = "--out",
) -> Iterator[Path | None]:
    """The one rule of output folders, for a block (a command's run), applied before any work (hold
    the folder's lock first); yields where earlier results were moved, or None.

    A folder holding another command's results, or `command`'s for another `recipe` (task, model,
    mask, settings: a JSON object), is refused with a `FolderHoldsOther` that names what it holds and
    the way out; with `fresh`, what it holds is moved aside (`move_aside`) instead. The same command
    with the same recipe continues there (a resume, or a rerun that replaces its own files), and the
    run record is written. So does the same command over results of unknown recipe (a folder of an
    earlier version: the command's own checks of what it resumes apply), whose record is written only
    once the block has succeeded. When the block fails and the folder holds nothing but the run
    record, the record goes too (with the lock's, the folder the command created: nothing is left)."""
    folder = Path(folder)
    had_record = (folder / RUN_RECORD).is_file()
    before = _visible(folder)
    moved, confirmed = _claim(folder, command, recipe, fresh, signatures or {}, recipes, option)
    if confirmed:
        _record(folder, command, recipe)
    try:
        yield moved
    except BaseException:
        # A run that failed before writing anything leaves no record of itself (the folder the command
        # created goes with its lock; a folder of the user's own files is as it was).
        if confirmed and not had_record and moved is None and _visible(folder) == before:
            (folder / RUN_RECORD).unlink(missing_ok=True)
        raise
    if not confirmed:
        _record(folder, command, recipe)


def _visible(folder: Path) -> set[str]:
    """The names in `folder` other than the lock, the run record and a staging folder."""
    if not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir() if p.name not in (LOCK_NAME, RUN_RECORD, STAGING_NAME)}


def _record(folder: Path, command: str, recipe: dict) -> None:
    atomic_write_json(folder / RUN_RECORD, {"command": command, "recipe": recipe})


def _claim(
    folder: Path,
    command: str,
    recipe: dict,
    fresh: bool,
    signatures: dict[str, tuple[str, ...]],
    recipes: dict[str, str] | None,
    option: str,
) -> tuple[Path | None, bool]:
    """(where earlier results were moved, whether the folder's recipe is known to be `recipe`)."""
    recipe = json.loads(json.dumps(recipe, default=str))  # as it reads back from the record (lists, not tuples)
    try:
        held = folder_holds(folder, signatures, recipes)
    except FileFormatError:  # a damaged run record: refused, or moved aside with what it describes
        if not fresh:
            raise
        return move_aside(folder), True
    if held is None:
        return None, True
    if fresh:
        return move_aside(folder), True
    other, recorded = held
    about = _summary(recorded) if recorded else ""
    what = f"the results of `headsup {other}`{f' ({about})' if about else ''}"
    if other != command:
        raise FolderHoldsOther(
            f"{option} {folder} holds {what}; choose another {option}, or add --fresh to move them aside "
            f"to {folder.name}.old-<time> and write the {command} results there"
        )
    if recorded is None:
        return None, False
    differences = recipe_differences(recorded, recipe)
    if differences:
        raise FolderHoldsOther(
            f"{option} {folder} holds {what} for another recipe: {'; '.join(differences)}. Rerun with the "
            f"same options to continue them, choose another {option}, or add --fresh to move them aside"
        )
    return None, True
