"""Strict reading of the files other tools and people hand us: JSON, JSON lines and CSV parsed by the
standard parsers, every value checked against the field's declared type, nothing guessed or coerced.

A file that breaks its format is a `FileFormatError` (a `ValueError`) naming the file, where in it
(line, row, entry, field) and what was expected. The parsers:

- JSON: `json` with duplicate keys refused (`{"a": 1, "a": 2}` is an error, not the last value);
  JSON's `NaN`/`Infinity` extensions are read as floats, each field says whether it allows them.
- JSON lines: one value per line, lines split on "\\n" only (`str.splitlines` would also split on
  U+2028, U+0085 and other characters a JSON string may hold); blank lines are skipped.
- CSV: the `csv` module on the file object (`newline=""`), so a quoted field keeps its commas and
  newlines; a row with more or fewer fields than the header is an error naming the row.

Values are never converted by Python's lenient constructors: `bool("false")` is True and
`int(1.5)` is 1, so a field that wants an integer takes a JSON integer (CSV: digits), a flag takes
`true`/`false` or 0/1, and anything else is an error.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def describe(value: Any, limit: int = 60) -> str:
    """A short printable form of `value` for error messages (its repr, cut at `limit` characters; a
    tensor by its dtype and shape). Defined here, without importing torch, so that reading task
    files stays light."""
    if type(value).__module__.startswith("torch") and hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class FileFormatError(ValueError):
    """A file that does not follow its format: `what` file, `path`, `where` in it (line, row, field;
    empty for the whole file) and the `problem` (what was expected, what was found)."""

    def __init__(self, what: str, path: str | os.PathLike, where: str, problem: str) -> None:
        self.what, self.path, self.where, self.problem = what, str(path), where, problem
        super().__init__(f"{what} {str(path)!r}{', ' + where if where else ''}: {problem}")

    def __reduce__(self):
        return type(self), (self.what, self.path, self.where, self.problem)


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of `path` (a leading byte-order mark dropped); a missing file, a folder or
    bytes that are not UTF-8 are a `FileFormatError`."""
    path = Path(path)
    if path.is_dir():
        raise FileFormatError(what, path, "", "is a folder, not a file")
    if not path.is_file():
        raise FileFormatError(what, path, "", "does not exist")
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise FileFormatError(
            what, path, f"line {line}", f"not UTF-8 text (byte {data[error.start : error.start + 1]!r})"
        ) from None


def parse_json(text: str, what: str, path: str | os.PathLike, where: str = "") -> Any:
    """`json.loads(text)` with duplicate keys refused; errors name the line and column."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as duplicate:
        raise FileFormatError(what, path, where, f"the key {duplicate.key!r} appears twice in one object") from None
    except json.JSONDecodeError as error:
        place = f"line {error.lineno}, column {error.colno}" if not where else f"{where}, column {error.colno}"
        raise FileFormatError(what, path, place, f"not valid JSON ({error.msg})") from None
    except RecursionError:
        raise FileFormatError(what, path, where, "is nested too deeply to be read as JSON") from None


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value of a file (see `parse_json`)."""
    return parse_json(read_text(path, what), what, path)


def read_jsonl(path: str | os.PathLike, what: str) -> list[tuple[str, Any]]:
    """`(where, value)` of every non-blank line of a JSON lines file, split on "\\n" only."""
    lines = enumerate(read_text(path, what).split("\n"), 1)
    return [(f"line {n}", parse_json(line, what, path, f"line {n}")) for n, line in lines if line.strip()]


def read_csv(
    path: str | os.PathLike, what: str, required: Iterable[str], optional: Iterable[str] = ()
) -> tuple[list[str], list[tuple[str, dict[str, str]]]]:
    """The header and `(where, row)` of every non-blank record of a CSV file with a header line.

    The header must hold every `required` column and may hold the `optional` ones, nothing else,
    each once. Every record must have exactly as many fields as the header. `where` is
    "row N (line L)": N counts records after the header, L is the file line the record ends on.
    """
    required, optional = list(required), list(optional)
    read_text(path, what)  # missing file, folder, not UTF-8: the same errors as every reader
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            while header == []:
                header = next(reader, None)
            if header is None:
                raise FileFormatError(what, path, "", f"is empty: it needs a header line with {', '.join(required)}")
            header = [name.strip() for name in header]
            _check_header(header, what, path, required, optional)
            rows = []
            for record in reader:
                if not record:
                    continue
                where = f"row {len(rows) + 1} (line {reader.line_num})"
                if len(record) != len(header):
                    hint = (
                        " (a comma inside a field needs the field in double quotes)"
                        if len(record) > len(header)
                        else ""
                    )
                    raise FileFormatError(
                        what, path, where, f"has {len(record)} fields, the header has {len(header)}{hint}"
                    )
                rows.append((where, dict(zip(header, record))))
    except csv.Error as error:
        raise FileFormatError(what, path, f"line {reader.line_num}", f"not valid CSV ({error})") from None
    return header, rows


def _check_header(header: list[str], what: str, path: str | os.PathLike, required: list, optional: list) -> None:
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise FileFormatError(what, path, "line 1", f"the header names the column(s) {repeated} twice")
    missing = [name for name in required if name not in header]
    if missing:
        raise FileFormatError(what, path, "line 1", f"the header {header} lacks the column(s) {', '.join(missing)}")
    unknown = [name for name in header if name not in required and name not in optional]
    if unknown:
        allowed = ", ".join(required + optional)
        raise FileFormatError(what, path, "line 1", f"unknown column(s) {unknown}; the columns are {allowed}")


# --------------------------------------------------------------------------------- field checks
class Fields:
    """Checks of one record's fields, raising `FileFormatError` with the file, the record and the field."""

    def __init__(self, what: str, path: str | os.PathLike, where: str) -> None:
        self.what, self.path, self.where = what, path, where

    def error(self, field: str | None, problem: str) -> FileFormatError:
        where = self.where if field is None else f"{self.where}, field {field!r}" if self.where else f"field {field!r}"
        return FileFormatError(self.what, self.path, where, problem)

    def keys(self, record: Any, required: Iterable[str], optional: Iterable[str] = ()) -> dict[str, Any]:
        """`record` must be a JSON object with every `required` key and no key outside `optional`."""
        required, optional = list(required), list(optional)
        if not isinstance(record, dict):
            raise self.error(None, f"expected an object with {', '.join(required)}, got {describe(record)}")
        missing = [k for k in required if k not in record]
        if missing:
            raise self.error(None, f"lacks the key(s) {', '.join(missing)} (it has {sorted(record)})")
        unknown = [k for k in record if k not in required and k not in optional]
        if unknown:
            raise self.error(None, f"unknown key(s) {unknown}; the keys are {', '.join(required + optional)}")
        return record

    def integer(self, field: str, value: Any, minimum: int | None = None) -> int:
        """A JSON integer (not a bool, not 1.0 or 1.5, not "1")."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, f"expected an integer, got {describe(value)}")
        if minimum is not None and value < minimum:
            raise self.error(field, f"expected an integer >= {minimum}, got {value}")
        return value

    def number(self, field: str, value: Any, *, finite: bool = False, minimum: float | None = None) -> float:
        """A JSON number (integer or float, not a bool or a string); NaN and infinities only when not `finite`."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(field, f"expected a number, got {describe(value)}")
        value = float(value)
        if finite and not math.isfinite(value):
            raise self.error(field, f"expected a finite number, got {value}")
        if minimum is not None and not value >= minimum:
            raise self.error(field, f"expected a number >= {minimum:g}, got {value}")
        return value

    def boolean(self, field: str, value: Any) -> bool:
        """A JSON `true` or `false` (not "false", not 0)."""
        if not isinstance(value, bool):
            raise self.error(field, f"expected true or false, got {describe(value)}")
        return value

    def flag(self, field: str, value: Any) -> bool:
        """`true`/`false` or the integers 0/1 (not 0.9, not "0")."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self.error(field, f"expected 0 or 1 (or true/false), got {describe(value)}")

    def text(self, field: str, value: Any, *, empty: bool = False) -> str:
        """A JSON string (non-empty unless `empty`)."""
        if not isinstance(value, str):
            raise self.error(field, f"expected a string, got {describe(value)}")
        if not empty and value == "":
            raise self.error(field, "expected a non-empty string, got ''")
        return value

    # CSV cells are text: each type has its written forms, nothing else.
    def csv_integer(self, field: str, cell: str, minimum: int | None = None) -> int:
        """Decimal digits with an optional sign (surrounding spaces allowed)."""
        if not _INTEGER.fullmatch(cell.strip()):
            raise self.error(field, f"expected an integer, got {describe(cell)}")
        return self.integer(field, int(cell.strip()), minimum)

    def csv_number(self, field: str, cell: str, *, finite: bool = False) -> float:
        """A decimal or scientific number, `nan` or `inf` (surrounding spaces allowed)."""
        if not _NUMBER.fullmatch(cell.strip()):
            raise self.error(field, f"expected a number, got {describe(cell)}")
        return self.number(field, float(cell.strip()), finite=finite)

    def csv_flag(self, field: str, cell: str) -> bool:
        """`0`/`1` or `true`/`false` (any case)."""
        word = cell.strip().lower()
        if word not in _FLAGS:
            raise self.error(field, f"expected 0 or 1 (or true/false), got {describe(cell)}")
        return _FLAGS[word]


_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_FLAGS = {"0": False, "1": True, "false": False, "true": True}


_SAFETENSORS_LENGTH = 8  # a safetensors file starts with its JSON header's length, little-endian


def safetensors_header(path: str | os.PathLike, what: str = "safetensors file") -> dict[str, Any]:
    """The JSON header of a safetensors file, read without its data: a file shorter than its header
    or than the data its tensors claim (a truncated download or copy), or with a malformed header, is
    a ValueError naming it (`what`: the kind of file), before any reader maps it."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a folder, not a file")
    if not path.is_file():
        raise ValueError(f"no {what} at {str(path)!r}")
    size = path.stat().st_size
    with open(path, "rb") as handle:
        start = handle.read(_SAFETENSORS_LENGTH)
        if len(start) < _SAFETENSORS_LENGTH:
            raise ValueError(
                f"{what} {str(path)!r} is truncated or not a safetensors file: {size} bytes, "
                f"less than the {_SAFETENSORS_LENGTH}-byte header length"
            )
        length = int.from_bytes(start, "little")
        if _SAFETENSORS_LENGTH + length > size:
            raise ValueError(
                f"{what} {str(path)!r} is truncated or not a safetensors file: its header claims {length} bytes "
                f"but the file has {size}"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{what} {str(path)!r} has a malformed JSON header ({error}); the file is corrupted"
        ) from error
    if not isinstance(header, dict):
        raise ValueError(f"{what} {str(path)!r} has a malformed header (a JSON object was expected)")
    ends = [
        entry["data_offsets"][1]
        for key, entry in header.items()
        if key != "__metadata__"
        and isinstance(entry, dict)
        and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2
        and isinstance(entry["data_offsets"][1], int)
    ]
    available = size - _SAFETENSORS_LENGTH - length
    if ends and max(ends) > available:
        raise ValueError(
            f"{what} {str(path)!r} is truncated: its tensors need {max(ends)} bytes of data but only "
            f"{available} are there"
        )
    return header
