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
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._io import atomic_write_json, atomic_write_text
from .._typecheck import checked
from .._validate import check_choice, check_out_file, describe
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
    file (or a `checkpoint-N/` folder holding `model.safetensors`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, got {describe(path)}")
    n_layers, n_heads = _shape_of(model_or_shape)
    file = _reference_file(Path(path))
    tensors, _ = read_safetensors(file, "reference mask file")
    if REFERENCE_KEY not in tensors:
        raise ValueError(
            f"{str(file)!r} is not a reference-layout mask: it has no tensor named {REFERENCE_KEY!r} "
            f"(it has {sorted(tensors)})"
        )
    flat = tensors[REFERENCE_KEY].detach().float().flatten()
    expected = n_layers * (n_heads + 1)
    if flat.numel() != expected:
        raise ValueError(
            f"{str(file)!r} holds {flat.numel()} logits; a {n_layers} x {n_heads} model needs "
            f"n_layers * (n_heads + 1) = {expected} (one FFN slot per layer)"
        )
    grid = flat.reshape(n_layers, n_heads + 1)
    return grid[:, :-1].clone(), grid[:, -1].clone()


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

    `mlp_kept` holds the node graph's MLP nodes (`m{layer}`) when it has them.
    """

    heads: list[Head]
    scores: list[float] | None = None
    kept: list[bool] | None = None
    mlp_kept: dict[int, bool] | None = None

    def scores_tensor(self, model_or_shape: Any, fill: float = float("nan")) -> Float[Tensor, "n_layers n_heads"]:
        """The scores as `[n_layers, n_heads]`; heads not listed get `fill`."""
        if self.scores is None:
            raise ValueError("this head list has no scores")
        n_layers, n_heads = _shape_of(model_or_shape)
        out = torch.full((n_layers, n_heads), float(fill))
        for (layer, head), score in zip(self._checked(n_layers, n_heads), self.scores):
            out[layer, head] = score
        return out

    def to_mask(self, model_or_shape: Any, listed: str | None = None) -> HeadMask:
        """A `HeadMask`: from the `kept` column (every head must be listed), or, with `listed`, the
        listed heads kept (every other head removed) or removed (every other head kept)."""
        n_layers, n_heads = _shape_of(model_or_shape)
        heads = self._checked(n_layers, n_heads)
        fp = _fingerprint_of(model_or_shape)
        if listed is None:
            if self.kept is None:
                raise ValueError("this head list has no kept column: pass listed='kept' or listed='removed'")
            missing = {(l, h) for l in range(n_layers) for h in range(n_heads)} - set(heads)
            if missing:
                raise ValueError(
                    f"the head list misses {len(missing)} heads (e.g. {sorted(missing)[0]}); "
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
        if self.mlp_kept is not None and len(self.mlp_kept) == n_layers:
            mask.mlp_values = torch.tensor([float(self.mlp_kept[l]) for l in range(n_layers)])
        return mask

    def _checked(self, n_layers: int, n_heads: int) -> list[Head]:
        for layer, head in self.heads:
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                raise ValueError(f"head ({layer}, {head}) is outside a {n_layers} x {n_heads} model")
        if len(set(self.heads)) != len(self.heads):
            raise ValueError("the head list names a head twice")
        return self.heads


def _rows(scores: Tensor | None, mask: HeadMask | None) -> list[dict[str, Any]]:
    if scores is None and mask is None:
        raise ValueError("pass scores, mask or both")
    shape = tuple(mask.values.shape) if mask is not None else tuple(scores.shape)
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


@checked
def read_head_list(path: str | os.PathLike) -> HeadList:
    """A head list written by `write_head_list` or by hand (CSV with a `layer,head` header, or JSON:
    `{"heads": [...]}` or a bare list of objects or of `[layer, head]` pairs)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, got {describe(path)}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no head list at {str(path)!r}")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        records = list(csv.DictReader(io.StringIO(text)))
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"head list {str(path)!r} is not valid JSON ({error})") from error
        records = data.get("heads") if isinstance(data, dict) else data
        if not isinstance(records, list):
            raise ValueError(f"head list {str(path)!r} must be a list of heads or {{'heads': [...]}}")
        records = [{"layer": r[0], "head": r[1]} if isinstance(r, (list, tuple)) else r for r in records]
    if not records:
        raise ValueError(f"head list {str(path)!r} lists no heads")
    try:
        heads = [(int(r["layer"]), int(r["head"])) for r in records]
        scores = [float(r["score"]) for r in records] if all("score" in r for r in records) else None
        kept = [bool(int(r["kept"])) for r in records] if all("kept" in r for r in records) else None
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"head list {str(path)!r} has a malformed row ({error}); each row needs layer and head"
        ) from error
    return HeadList(heads, scores, kept)


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


_HEAD_NODE = re.compile(r"^a(\d+)\.h(\d+)$")
_MLP_NODE = re.compile(r"^m(\d+)$")


@checked
def read_node_graph(path: str | os.PathLike) -> HeadList:
    """The attention-head nodes (`a{layer}.h{head}`) of a circuit-graph JSON: `kept` = `in_graph`,
    `scores` = node scores when every head has one; MLP nodes (`m{layer}`) in `mlp_kept`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, got {describe(path)}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no node graph at {str(path)!r}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"node graph {str(path)!r} is not valid JSON ({error})") from error
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise ValueError(f"node graph {str(path)!r} has no 'nodes' object")
    heads, scores, kept, mlp = [], [], [], {}
    for name, node in data["nodes"].items():
        flag = node.get("in_graph", True) if isinstance(node, dict) else bool(node)  # older files: name -> bool
        if (m := _HEAD_NODE.match(name)) is not None:
            heads.append((int(m.group(1)), int(m.group(2))))
            kept.append(bool(flag))
            scores.append(node.get("score") if isinstance(node, dict) else None)
        elif (m := _MLP_NODE.match(name)) is not None:
            mlp[int(m.group(1))] = bool(flag)
    if not heads:
        raise ValueError(f"node graph {str(path)!r} has no attention-head nodes (a<layer>.h<head>)")
    has_scores = all(s is not None for s in scores)
    return HeadList(heads, [float(s) for s in scores] if has_scores else None, kept, mlp or None)
