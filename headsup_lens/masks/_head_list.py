"""Head lists (CSV or JSON), read and written: one row per head, `layer, head` and optionally `score`
and `kept` (0/1). The simplest thing any tool can write; `HeadList` is also what a node graph reads as.

Reading is strict (`.._formats`): every field is checked against its declared type and range, a head or
column given twice is refused, and with a model every head must lie inside its grid; a wrong file is a
`FileFormatError` naming the file, the row and what was expected. Nothing is guessed, truncated or coerced.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._formats import Fields, FileFormatError, read_csv, read_json
from .._io import atomic_write_json, atomic_write_text
from .._validate import check_choice, check_out_file, describe
from ._head_mask import Head, HeadMask, _check_mask_shape, _fingerprint_of, shape_of


@dataclass
class HeadList:
    """Heads read from a head list or node graph: `heads[i]` with optional `scores[i]` and `kept[i]`.

    `mlp_kept` holds the node graph's MLP nodes (`m{layer}`) when it has them. `shape` is the
    `(n_layers, n_heads)` grid the file declares (a node graph's `cfg`); a model of another shape
    is refused. `source` names the file it was read from, for error messages. Heads are distinct
    `(layer, head)` pairs of non-negative integers; a duplicate is a ValueError.
    """

    heads: list[Head]
    scores: list[float] | None = None
    kept: list[bool] | None = None
    mlp_kept: dict[int, bool] | None = None
    shape: tuple[int, int] | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        for i, head in enumerate(self.heads):
            if len(head) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in head):
                raise ValueError(f"{self._name}: heads[{i}] must be a (layer, head) pair of integers >= 0, got {head}")
        self.heads = [(layer, head) for layer, head in self.heads]  # [layer, head] lists become pairs
        for column in ("scores", "kept"):
            values = getattr(self, column)
            if values is not None and len(values) != len(self.heads):
                raise ValueError(f"{self._name}: {len(values)} {column} for {len(self.heads)} heads")
        seen: dict[Head, int] = {}
        for i, head in enumerate(self.heads):
            if head in seen:
                raise ValueError(f"{self._name} names head {head} twice (entries {seen[head]} and {i})")
            seen[head] = i
        if self.shape is not None:
            self.shape = _check_mask_shape(self.shape)
            outside = [h for h in self.heads if not (h[0] < self.shape[0] and h[1] < self.shape[1])]
            if outside:
                raise ValueError(f"{self._name}: head {outside[0]} is outside its own {self._grid} grid")

    @property
    def _name(self) -> str:
        return "the head list" if self.source is None else repr(self.source)

    @property
    def _grid(self) -> str:
        return f"{self.shape[0]} x {self.shape[1]}" if self.shape else "?"

    def scores_tensor(self, model_or_shape: Any, fill: float = float("nan")) -> Float[Tensor, "n_layers n_heads"]:
        """The scores as `[n_layers, n_heads]`; heads not listed get `fill`."""
        if self.scores is None:
            raise ValueError(f"{self._name} has no scores")
        n_layers, n_heads = shape_of(model_or_shape)
        out = torch.full((n_layers, n_heads), float(fill))
        for (layer, head), score in zip(self._checked(n_layers, n_heads), self.scores):
            out[layer, head] = score
        return out

    def to_mask(self, model_or_shape: Any, listed: str | None = None) -> HeadMask:
        """A `HeadMask`: from the `kept` column (every head must be listed), or, with `listed`, the
        listed heads kept (every other head removed) or removed (every other head kept). MLP nodes
        (`mlp_kept`) become the mask's `mlp_values`; they must cover every layer."""
        n_layers, n_heads = shape_of(model_or_shape)
        heads = self._checked(n_layers, n_heads)
        fp = _fingerprint_of(model_or_shape)
        if listed is None:
            if self.kept is None:
                raise ValueError(f"{self._name} has no kept column: pass listed='kept' or listed='removed'")
            missing = {(l, h) for l in range(n_layers) for h in range(n_heads)} - set(heads)
            if missing:
                raise ValueError(
                    f"{self._name} misses {len(missing)} heads (e.g. {sorted(missing)[0]}); "
                    "pass listed='kept' or listed='removed' to say what unlisted heads are"
                )
            removed = [h for h, k in zip(heads, self.kept) if not k]
            mask = HeadMask.from_heads(removed, fp or (n_layers, n_heads))
        else:
            check_choice("listed", listed, ("kept", "removed"))
            if listed == "removed":
                mask = HeadMask.from_heads(heads, fp or (n_layers, n_heads))
            else:
                keep = set(heads)
                others = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in keep]
                mask = HeadMask.from_heads(others, fp or (n_layers, n_heads))
        if self.mlp_kept is not None:
            if sorted(self.mlp_kept) != list(range(n_layers)):
                raise ValueError(
                    f"{self._name} has MLP nodes for layers {sorted(self.mlp_kept)}; a {n_layers}-layer model "
                    f"needs one for each of 0..{n_layers - 1}"
                )
            mask.mlp_values = torch.tensor([float(self.mlp_kept[l]) for l in range(n_layers)])
        return mask

    def _checked(self, n_layers: int, n_heads: int) -> list[Head]:
        if self.shape is not None and self.shape != (n_layers, n_heads):
            raise ValueError(
                f"{self._name} was written for a {self._grid} model (n_layers x n_heads), "
                f"not this {n_layers} x {n_heads} one"
            )
        for layer, head in self.heads:
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                raise ValueError(f"{self._name}: head ({layer}, {head}) is outside a {n_layers} x {n_heads} model")
        return self.heads


def _rows(scores: Tensor | None, mask: HeadMask | None) -> list[dict[str, Any]]:
    if mask is not None:
        shape = tuple(mask.values.shape)
    elif scores is not None:
        shape = tuple(scores.shape)
    else:
        raise ValueError("pass scores, mask or both")
    if scores is not None:
        scores = torch.as_tensor(scores).detach().float().cpu()
        if scores.ndim != 2 or (mask is not None and tuple(scores.shape) != shape):
            raise ValueError(f"scores must be [n_layers, n_heads] {list(shape)}, got {list(scores.shape)}")
    rows = []
    for layer in range(shape[0]):
        for head in range(shape[1]):
            row: dict[str, Any] = {"layer": layer, "head": head}
            if scores is not None:
                row["score"] = float(scores[layer, head])
            if mask is not None:
                row["kept"] = int(mask.values[layer, head] > 0)
            rows.append(row)
    return rows


def write_head_list(
    path: str | os.PathLike, scores: Float[Tensor, "n_layers n_heads"] | None = None, *, mask: HeadMask | None = None
) -> Path:
    """Write every head as one row `layer, head[, score][, kept]`: CSV for a `.csv` path, else JSON
    (`{"heads": [{"layer": 0, "head": 0, "score": ..., "kept": 1}, ...]}`)."""
    path = check_out_file(path, "path")
    rows = _rows(scores, mask)
    if path.suffix.lower() == ".csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
        return atomic_write_text(path, buffer.getvalue())
    return atomic_write_json(path, {"heads": rows})


_HEAD_LIST = "head list"
_HEAD_COLUMNS, _HEAD_OPTIONAL = ("layer", "head"), ("score", "kept")


def read_head_list(path: str | os.PathLike, model_or_shape: Any = None) -> HeadList:
    """A head list written by `write_head_list` or by hand: CSV with a `layer,head[,score][,kept]`
    header, or JSON: `{"heads": [{"layer": 0, "head": 1, "score": 0.5, "kept": 1}, ...]}`, a bare
    list of such objects, or a bare list of `[layer, head]` pairs.

    `layer` and `head` are integers >= 0 (JSON integers; CSV digits: 1.5 or "1" in JSON is an
    error, never truncated), `score` a number (NaN allowed: "not scored"), `kept` 0/1 or
    true/false (never 0.9, never "false"). A column is on every row or on none; a head listed twice
    and a key or column outside these are errors. With `model_or_shape`, every head must lie inside
    that model's grid. A malformed file is a `FileFormatError` naming the file, row and field.
    """
    path = Path(path)
    records: list[tuple[Fields, dict[str, Any]]] = []  # (field checks of the row, its parsed values)
    if path.suffix.lower() == ".csv":
        header, rows = read_csv(path, _HEAD_LIST, _HEAD_COLUMNS, _HEAD_OPTIONAL)
        for where, row in rows:
            fields = Fields(_HEAD_LIST, path, where)
            records.append((fields, _head_row(fields, {k: row[k] for k in header}, text=True)))
    else:
        data = read_json(path, _HEAD_LIST)
        if isinstance(data, dict):
            data = Fields(_HEAD_LIST, path, "").keys(data, ["heads"])["heads"]
        if not isinstance(data, list):
            raise FileFormatError(
                _HEAD_LIST, path, "", f"expected a list of heads or {{'heads': [...]}}, got {describe(data)}"
            )
        for i, entry in enumerate(data):
            fields = Fields(_HEAD_LIST, path, f"entry {i}")
            if isinstance(entry, list):
                if len(entry) != 2:
                    raise fields.error(None, f"expected a [layer, head] pair, got {describe(entry)}")
                entry = {"layer": entry[0], "head": entry[1]}
            records.append((fields, _head_row(fields, fields.keys(entry, _HEAD_COLUMNS, _HEAD_OPTIONAL), text=False)))
    if not records:
        raise FileFormatError(_HEAD_LIST, path, "", "lists no heads")
    columns = {}
    for column in _HEAD_OPTIONAL:
        having = [column in value for _, value in records]
        if any(having) and not all(having):
            fields = records[having.index(False)][0]
            raise fields.error(column, f"is missing; the {column} column must be on every row or on none")
        columns[column] = [value[column] for _, value in records] if all(having) else None
    heads = [(value["layer"], value["head"]) for _, value in records]
    refuse_repeats(heads, [fields for fields, _ in records])
    listing = HeadList(heads, columns["score"], columns["kept"], source=str(path))
    check_fits(listing, model_or_shape, [fields for fields, _ in records])
    return listing


def _head_row(fields: Fields, row: dict[str, Any], *, text: bool) -> dict[str, Any]:
    """One head's values from a CSV row (`text`: cells are strings) or a JSON object."""
    integer, number, flag = (
        (fields.csv_integer, fields.csv_number, fields.csv_flag)
        if text
        else (fields.integer, fields.number, fields.flag)
    )
    value: dict[str, Any] = {"layer": integer("layer", row["layer"], 0), "head": integer("head", row["head"], 0)}
    if "score" in row:
        value["score"] = number("score", row["score"])
    if "kept" in row:
        value["kept"] = flag("kept", row["kept"])
    return value


def refuse_repeats(heads: list[Head], fields: list[Fields]) -> None:
    first: dict[Head, int] = {}
    for i, head in enumerate(heads):
        if head in first:
            raise fields[i].error(None, f"names head {head} again (first at {fields[first[head]].where})")
        first[head] = i


def check_fits(listing: HeadList, model_or_shape: Any, fields: list[Fields]) -> None:
    """With a model, every head of a file lies inside its grid (errors name the row)."""
    if model_or_shape is None:
        return
    n_layers, n_heads = shape_of(model_or_shape)
    for head, where in zip(listing.heads, fields):
        if not (head[0] < n_layers and head[1] < n_heads):
            raise where.error(None, f"head {head} is outside a {n_layers} x {n_heads} model")
    listing._checked(n_layers, n_heads)
