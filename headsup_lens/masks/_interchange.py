"""Masks in and out of other tools: the paper's reference checkpoints, plain head lists, node graphs.

Three layouts, each read and written:

* **Reference layout** (the paper's code and follow-up work such as AHAMask): a safetensors file
  holding one flat tensor named `tensor` of `n_layers * (n_heads + 1)` logits; layer L owns the
  slice `[L * (n_heads + 1), (L + 1) * (n_heads + 1))`, whose last entry is an FFN slot (unused by
  the reference: its MLP gate multiplies by 1). The reference keeps a head where
  `sigmoid(logit) > 0.5` (its evaluation uses `>= 0.5`; the two differ only at a logit of exactly
  0). Hugging Face Trainer writes one `checkpoint-N/model.safetensors` per save: read as a series,
  they are the Fig. 3 weight trajectory (`read_reference_checkpoints` -> `weight_trajectories`).
* **Head lists** (CSV or JSON): one row per head, `layer, head` and optionally `score` and
  `kept` (0/1). The simplest thing any tool can write.
* **Node graphs** (JSON): the node part of the circuit-graph JSON that EAP-IG's `Graph.from_json`
  and the MIB circuit track read: `{"cfg": {n_layers, n_heads, d_model, parallel_attn_mlp},
  "nodes": {"input": {...}, "a0.h0": {"in_graph": bool, "score": float}, ..., "m0": {...},
  "logits": {...}}, "edges": {...}}`. That format was chosen because it is what current circuit
  tools exchange and it names heads exactly as TransformerLens graphs do (`a{layer}.h{head}`,
  `m{layer}`). A head mask is node-level: a head is `in_graph` when the mask keeps it. `edges` is
  required by the format; it is written empty (a node-level circuit) unless `edges=True` asks for
  every edge of the graph, in the graph exactly when both of its ends are.

Reading is strict (`.._formats`): every field is checked against its declared type and range, the
file's own shape (a node graph's `cfg`, a reference tensor's grid) against the model's, and a head,
key or step given twice is refused; a wrong file is a `FileFormatError` naming the file, where in it
and what was expected. Nothing is guessed, truncated or coerced.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._formats import Fields, FileFormatError, read_csv, read_json
from .._io import atomic_write_json, atomic_write_text
from .._typecheck import checked
from .._validate import check_choice, check_float, check_out_file, describe
from ._files import read_safetensors, write_safetensors
from ._head_mask import Head, HeadMask, _check_mask_shape, _fingerprint_of

REFERENCE_KEY = "tensor"
REFERENCE_FILE = "model.safetensors"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# Logit written for a binary value that has no trained logit: sigmoid(+-10) is 1 - 4.5e-5 / 4.5e-5.
_BINARY_LOGIT = 10.0

FFN_SLOTS = ("drop", "mlp")  # what to do with the reference's per-layer FFN logit


def _shape_of(model_or_shape: Any, name: str = "model_or_shape") -> tuple[int, int]:
    fp = _fingerprint_of(model_or_shape)
    if fp is not None:
        return fp.n_layers, fp.n_heads
    try:
        return _check_mask_shape(model_or_shape)
    except TypeError as error:
        raise TypeError(str(error).replace("model_or_shape", name)) from error


# ---------------------------------------------------------------------- reference layout
def _reference_file(path: Path) -> Path:
    if path.is_dir():
        candidate = path / REFERENCE_FILE
        if not candidate.is_file():
            found = sorted(p.name for p in path.glob("*.safetensors"))
            hint = f" (it has {', '.join(found)})" if found else ""
            raise ValueError(f"reference checkpoint folder {str(path)!r} has no {REFERENCE_FILE}{hint}")
        return candidate
    return path


@checked
def reference_logits(
    path: str | os.PathLike, model_or_shape: Any
) -> tuple[Float[Tensor, "n_layers n_heads"], Float[Tensor, " n_layers"]]:
    """The head logits `[n_layers, n_heads]` and FFN-slot logits `[n_layers]` of a reference-layout
    file (or a `checkpoint-N/` folder holding `model.safetensors`).

    The file's tensor is the flat `[n_layers * (n_heads + 1)]` vector the reference writes, or that
    grid itself, `[n_layers, n_heads + 1]`; another shape (a grid of another model flattened onto
    this one included) is a `FileFormatError`, as are integer tensors and NaN or infinite logits (a
    NaN FFN logit would otherwise read as "remove this MLP")."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, got {describe(path)}")
    n_layers, n_heads = _shape_of(model_or_shape)
    file = _reference_file(Path(path))
    tensors, _ = read_safetensors(file, "reference mask file")
    what = "reference mask file"
    if REFERENCE_KEY not in tensors:
        raise FileFormatError(
            what,
            file,
            "",
            f"is not a reference-layout mask: it has no tensor named {REFERENCE_KEY!r} (it has {sorted(tensors)})",
        )
    tensor = tensors[REFERENCE_KEY].detach()
    where = f"tensor {REFERENCE_KEY!r}"
    if not tensor.is_floating_point():
        raise FileFormatError(what, file, where, f"expected floating-point logits, got a {tensor.dtype} tensor")
    expected = n_layers * (n_heads + 1)
    grid = (n_layers, n_heads + 1)
    if tensor.ndim == 2 and tuple(tensor.shape) != grid:
        raise FileFormatError(
            what,
            file,
            where,
            f"has shape {list(tensor.shape)}; a {n_layers} x {n_heads} model needs "
            f"[n_layers, n_heads + 1] = {list(grid)} (one FFN slot per layer), or the flat [{expected}]",
        )
    if tensor.ndim not in (1, 2):
        raise FileFormatError(what, file, where, f"has {tensor.ndim} dimensions; expected a flat vector or a grid")
    if tensor.numel() != expected:
        raise FileFormatError(
            what,
            file,
            where,
            f"holds {tensor.numel()} logits; a {n_layers} x {n_heads} model needs "
            f"n_layers * (n_heads + 1) = {expected} (one FFN slot per layer)",
        )
    logits = tensor.float().reshape(grid)
    bad = (~torch.isfinite(logits)).nonzero().tolist()
    if bad:
        layer, slot = bad[0]
        place = "its FFN slot" if slot == n_heads else f"head {slot}"
        raise FileFormatError(
            what,
            file,
            where,
            f"{len(bad)} logit(s) are NaN or infinite, the first at layer {layer}, {place} "
            f"({logits[layer, slot].item()}); a mask needs finite logits",
        )
    return logits[:, :-1].clone(), logits[:, -1].clone()


@checked
def read_reference(path: str | os.PathLike, model_or_shape: Any, *, ffn: str = "drop") -> HeadMask:
    """A reference-layout mask as a `HeadMask` (the heads the reference keeps: `sigmoid(logit) >= 0.5`).

    `model_or_shape` (a model, `ModelFingerprint` or `(n_layers, n_heads)`) gives the layout. The
    FFN slot is dropped (`ffn="drop"`, the reference never uses it) or kept as the MLP mask
    (`ffn="mlp"`: `mlp_values` = 1 where its sigmoid is >= 0.5). Its raw logits are kept in
    `metadata["ffn_logits"]` either way.
    """
    check_choice("ffn", ffn, FFN_SLOTS)
    logits, ffn_logits = reference_logits(path, model_or_shape)
    fp = _fingerprint_of(model_or_shape)
    mask = HeadMask.from_logits(logits, fp, source="reference", ffn_logits=ffn_logits.tolist())
    if ffn == "mlp":
        mask.mlp_values = (ffn_logits >= 0).float()
    return mask


@checked
def write_reference(mask: HeadMask, path: str | os.PathLike, *, ffn_logit: float = 4.0) -> Path:
    """Write `mask` in the reference layout: `path` is a `.safetensors` file, or a folder that gets
    `model.safetensors` (a `checkpoint-N/` folder the reference's notebooks can read).

    The head logits are the mask's trained logits; a mask without logits writes +-10 for kept and
    removed heads (a fractional value v writes logit(v)). The FFN slot gets the MLP mask when the
    mask has one (+-10), else `ffn_logit` (the reference's initial value 4: never used by it).
    """
    if not isinstance(mask, HeadMask):
        raise TypeError(f"mask must be a HeadMask, got {describe(mask)}")
    ffn_logit = check_float("ffn_logit", ffn_logit)  # a NaN slot would read back as "remove this MLP"
    target = Path(path)
    if target.suffix != ".safetensors":
        target = target / REFERENCE_FILE
    target = check_out_file(target, "path")
    if mask.logits is not None:
        logits = mask.logits
    else:
        logits = torch.logit(mask.values.clamp(0, 1), eps=None).clamp(-_BINARY_LOGIT, _BINARY_LOGIT)
    if mask.mlp_values is not None:
        ffn = torch.where(mask.mlp_values > 0, _BINARY_LOGIT, -_BINARY_LOGIT)
    else:
        ffn = torch.full((mask.n_layers,), float(ffn_logit))
    flat = torch.cat([logits.float(), ffn.float()[:, None]], dim=1).flatten().contiguous()
    return write_safetensors(target, {REFERENCE_KEY: flat}, {"format": "pt"})


@checked
def read_reference_checkpoints(folder: str | os.PathLike, model_or_shape: Any, *, ffn: str = "drop") -> list[HeadMask]:
    """Every `checkpoint-N/` under `folder` (a Hugging Face Trainer output), in step order, as masks
    with their logits and `metadata["step"] = N`: pass the list to `analysis.weight_trajectories`
    for the Fig. 3 head-weight trajectories."""
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a path, got {describe(folder)}")
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"no folder at {str(root)!r}")
    found = sorted((int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name)))
    if not found:
        raise ValueError(f"{str(root)!r} has no checkpoint-N/ folders")
    for (step, path), (next_step, other) in itertools.pairwise(found):
        if step == next_step:  # checkpoint-100 and checkpoint-0100: one step, two points
            raise FileFormatError(
                "reference checkpoint folder",
                root,
                f"step {step}",
                f"{path.name}/ and {other.name}/ are both step {step}; a trajectory has one point per step",
            )
    masks = []
    for step, path in found:
        mask = read_reference(path, model_or_shape, ffn=ffn)
        mask.metadata["step"] = step
        masks.append(mask)
    return masks


# ---------------------------------------------------------------------- head lists
@checked
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
        n_layers, n_heads = _shape_of(model_or_shape)
        out = torch.full((n_layers, n_heads), float(fill))
        for (layer, head), score in zip(self._checked(n_layers, n_heads), self.scores):
            out[layer, head] = score
        return out

    def to_mask(self, model_or_shape: Any, listed: str | None = None) -> HeadMask:
        """A `HeadMask`: from the `kept` column (every head must be listed), or, with `listed`, the
        listed heads kept (every other head removed) or removed (every other head kept). MLP nodes
        (`mlp_kept`) become the mask's `mlp_values`; they must cover every layer."""
        n_layers, n_heads = _shape_of(model_or_shape)
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


@checked
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


@checked
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
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, got {describe(path)}")
    path = Path(path)
    records: list[tuple[Fields, dict[str, Any]]] = []  # (field checks of the row, its parsed values)
    if path.suffix.lower() == ".csv":
        header, rows = read_csv(path, _HEAD_LIST, _HEAD_COLUMNS, _HEAD_OPTIONAL)
        for where, row in rows:
            fields = Fields(_HEAD_LIST, path, where)
            value: dict[str, Any] = {
                "layer": fields.csv_integer("layer", row["layer"], 0),
                "head": fields.csv_integer("head", row["head"], 0),
            }
            if "score" in header:
                value["score"] = fields.csv_number("score", row["score"])
            if "kept" in header:
                value["kept"] = fields.csv_flag("kept", row["kept"])
            records.append((fields, value))
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
            entry = fields.keys(entry, _HEAD_COLUMNS, _HEAD_OPTIONAL)
            value: dict[str, Any] = {
                "layer": fields.integer("layer", entry["layer"], 0),
                "head": fields.integer("head", entry["head"], 0),
            }
            if "score" in entry:
                value["score"] = fields.number("score", entry["score"])
            if "kept" in entry:
                value["kept"] = fields.flag("kept", entry["kept"])
            records.append((fields, value))
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
    _refuse_repeats(heads, [fields for fields, _ in records])
    listing = HeadList(heads, columns["score"], columns["kept"], source=str(path))
    _check_fits(listing, model_or_shape, [fields for fields, _ in records])
    return listing


def _refuse_repeats(heads: list[Head], fields: list[Fields]) -> None:
    first: dict[Head, int] = {}
    for i, head in enumerate(heads):
        if head in first:
            raise fields[i].error(None, f"names head {head} again (first at {fields[first[head]].where})")
        first[head] = i


def _check_fits(listing: HeadList, model_or_shape: Any, fields: list[Fields]) -> None:
    """With a model, every head of a file lies inside its grid (errors name the row)."""
    if model_or_shape is None:
        return
    n_layers, n_heads = _shape_of(model_or_shape)
    for head, where in zip(listing.heads, fields):
        if not (head[0] < n_layers and head[1] < n_heads):
            raise where.error(None, f"head {head} is outside a {n_layers} x {n_heads} model")
    listing._checked(n_layers, n_heads)


# ---------------------------------------------------------------------- node graphs
def _graph_cfg(model_or_shape: Any) -> dict[str, Any]:
    n_layers, n_heads = _shape_of(model_or_shape)
    cfg = getattr(model_or_shape, "cfg", None)
    return {
        "n_layers": n_layers,
        "n_heads": n_heads,
        "d_model": int(getattr(cfg, "d_model", 0) or 0),
        "parallel_attn_mlp": bool(getattr(cfg, "parallel_attn_mlp", False) or False),
    }


def _graph_edges(cfg: dict[str, Any], in_graph: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """Every edge of the residual graph, in the graph exactly when both of its ends are."""
    edges: dict[str, dict[str, Any]] = {}
    upstream = ["input"]

    def add(parent: str, child: str, qkv: str | None = None) -> None:
        name = f"{parent}->{child}" if qkv is None else f"{parent}->{child}<{qkv}>"
        edges[name] = {"score": 0.0, "in_graph": bool(in_graph[parent] and in_graph[child])}

    for layer in range(cfg["n_layers"]):
        heads = [f"a{layer}.h{h}" for h in range(cfg["n_heads"])]
        for node in upstream:
            for head in heads:
                for qkv in "qkv":
                    add(node, head, qkv)
            if cfg["parallel_attn_mlp"]:
                add(node, f"m{layer}")
        upstream += heads
        if not cfg["parallel_attn_mlp"]:
            for node in upstream:
                add(node, f"m{layer}")
        upstream.append(f"m{layer}")
    for node in upstream:
        add(node, "logits")
    return edges


@checked
def write_node_graph(
    path: str | os.PathLike,
    model_or_shape: Any,
    *,
    mask: HeadMask | None = None,
    scores: Float[Tensor, "n_layers n_heads"] | None = None,
    edges: bool = False,
) -> Path:
    """Write heads as the nodes of a circuit-graph JSON (EAP-IG / MIB layout; see the module doc).

    A head is `in_graph` when `mask` keeps it (every head without a mask), with `scores` as node
    scores; MLP nodes are in the graph unless `mask.mlp_values` removes them; `input` and `logits`
    always are. `edges=True` also writes every edge (large: ~10^5 for a 30-layer model).
    """
    path = check_out_file(path, "path")
    cfg = _graph_cfg(model_or_shape)
    n_layers, n_heads = cfg["n_layers"], cfg["n_heads"]
    if mask is not None and tuple(mask.values.shape) != (n_layers, n_heads):
        raise ValueError(f"mask shape {list(mask.values.shape)} does not fit {n_layers} x {n_heads}")
    if scores is not None:
        scores = torch.as_tensor(scores).detach().float().cpu()
        if tuple(scores.shape) != (n_layers, n_heads):
            raise ValueError(f"scores must be [n_layers, n_heads] = {[n_layers, n_heads]}, got {list(scores.shape)}")
    nodes: dict[str, dict[str, Any]] = {"input": {"in_graph": True}}
    for layer in range(n_layers):
        for head in range(n_heads):
            node: dict[str, Any] = {"in_graph": bool(mask is None or mask.values[layer, head] > 0)}
            if scores is not None:
                node["score"] = float(scores[layer, head])
            nodes[f"a{layer}.h{head}"] = node
        mlp_in = mask is None or mask.mlp_values is None or bool(mask.mlp_values[layer] > 0)
        nodes[f"m{layer}"] = {"in_graph": mlp_in}
    nodes["logits"] = {"in_graph": True}
    if scores is not None:  # the format wants a score on every node or none: NaN marks "not scored"
        for node in nodes.values():
            node.setdefault("score", float("nan"))
    flags = {name: node["in_graph"] for name, node in nodes.items()}
    graph = {"cfg": cfg, "nodes": nodes, "edges": _graph_edges(cfg, flags) if edges else {}}
    return atomic_write_text(path, json.dumps(graph, indent=1) + "\n")


_HEAD_NODE = re.compile(r"a(0|[1-9][0-9]*)\.h(0|[1-9][0-9]*)")
_MLP_NODE = re.compile(r"m(0|[1-9][0-9]*)")
_GRAPH = "node graph"
_NODE_KEYS, _NODE_OPTIONAL = ("in_graph",), ("score", "neurons")


@checked
def read_node_graph(path: str | os.PathLike, model_or_shape: Any = None) -> HeadList:
    """The attention-head nodes (`a{layer}.h{head}`) of a circuit-graph JSON: `kept` = `in_graph`,
    `scores` = node scores when every head has one (NaN: not scored); MLP nodes
    (`m{layer}`) in `mlp_kept`.

    The file must follow the format: `cfg` with integer `n_layers` and `n_heads` (the list's
    `shape`: a model of another shape is refused), `nodes` naming exactly `input`, `logits`, every
    head `a{layer}.h{head}` of that grid and either every MLP node `m{layer}` or none, each an
    object whose `in_graph` is a JSON boolean (`"false"` is an error, never a kept head) or, in
    older files, the boolean itself. Duplicate keys are errors. With `model_or_shape`, the file's
    `cfg` must match it. A malformed file is a `FileFormatError` naming the file and the node.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, got {describe(path)}")
    path = Path(path)
    top = Fields(_GRAPH, path, "")
    data = top.keys(read_json(path, _GRAPH), ["cfg", "nodes"], ["edges"])
    checks = Fields(_GRAPH, path, "cfg")
    cfg = data["cfg"]  # the model's description: other tools add keys of their own, only the grid is read
    if not isinstance(cfg, dict) or not {"n_layers", "n_heads"} <= set(cfg):
        raise checks.error(None, f"expected an object with n_layers and n_heads, got {describe(cfg)}")
    n_layers, n_heads = checks.integer("n_layers", cfg["n_layers"], 1), checks.integer("n_heads", cfg["n_heads"], 1)
    if not isinstance(data["nodes"], dict):
        raise top.error("nodes", f"expected an object of nodes, got {describe(data['nodes'])}")
    heads, scores, kept, mlp = [], [], [], {}
    for name, node in data["nodes"].items():
        fields = Fields(_GRAPH, path, f"node {name!r}")
        if isinstance(node, bool):  # older files: name -> in_graph
            flag, score = node, None
        else:
            node = fields.keys(node, _NODE_KEYS, _NODE_OPTIONAL)
            flag = fields.boolean("in_graph", node["in_graph"])
            score = node.get("score")
            if score is not None:
                score = fields.number("score", score)
        if (m := _HEAD_NODE.fullmatch(name)) is not None:
            head = (int(m.group(1)), int(m.group(2)))
            if not (head[0] < n_layers and head[1] < n_heads):
                raise fields.error(None, f"head {head} is outside the graph's own {n_layers} x {n_heads} cfg")
            heads.append(head)
            kept.append(flag)
            scores.append(score)
        elif (m := _MLP_NODE.fullmatch(name)) is not None:
            if int(m.group(1)) >= n_layers:
                raise fields.error(None, f"layer {m.group(1)} is outside the graph's own {n_layers}-layer cfg")
            mlp[int(m.group(1))] = flag
        elif name not in ("input", "logits"):
            raise fields.error(None, "is not a node of the format (input, logits, a<layer>.h<head>, m<layer>)")
    listed = set(heads)
    missing = [f"a{l}.h{h}" for l in range(n_layers) for h in range(n_heads) if (l, h) not in listed]
    missing += [name for name in ("input", "logits") if name not in data["nodes"]]
    if mlp:
        missing += [f"m{l}" for l in range(n_layers) if l not in mlp]
    if missing:
        raise top.error("nodes", f"lacks {len(missing)} node(s) of its {n_layers} x {n_heads} cfg, e.g. {missing[0]!r}")
    has_scores = all(s is not None for s in scores)
    listing = HeadList(heads, scores if has_scores else None, kept, mlp or None, (n_layers, n_heads), str(path))
    if model_or_shape is not None:
        listing._checked(*_shape_of(model_or_shape))
    return listing
