"""Node graphs (JSON), read and written: the node part of the circuit-graph JSON that EAP-IG's
`Graph.from_json` and the MIB circuit track read: `{"cfg": {n_layers, n_heads, d_model,
parallel_attn_mlp}, "nodes": {"input": {...}, "a0.h0": {"in_graph": bool, "score": float}, ..., "m0":
{...}, "logits": {...}}, "edges": {...}}`. That format was chosen because it is what current circuit
tools exchange and it names heads exactly as TransformerLens graphs do (`a{layer}.h{head}`, `m{layer}`).
A head mask is node-level: a head is `in_graph` when the mask keeps it. `edges` is required by the
format; it is written empty (a node-level circuit) unless `edges=True` asks for every edge of the
graph, in the graph exactly when both of its ends are.

Reading is strict (`.._formats`): the file's `cfg` is checked against the model's shape, every node's
fields against their types, and a node given twice is refused (a `FileFormatError` naming the node).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._formats import Fields, read_json
from .._io import atomic_write_text
from .._validate import check_out_file, describe
from ._head_list import HeadList
from ._head_mask import HeadMask, shape_of


def _graph_cfg(model_or_shape: Any) -> dict[str, Any]:
    n_layers, n_heads = shape_of(model_or_shape)
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
        listing._checked(*shape_of(model_or_shape))
    return listing
