"""Figures over heads: mask heat maps (Fig. 7), usage counts, patterns, trajectories (Fig. 3),
Jaccard matrices, the alpha grid (Fig. 6), attention on target (Table 7)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from ..analysis import PathwayHeads
from ..masks import HeadMask
from ._traces import unit_heatmap


def _values(item: HeadMask | Tensor) -> Tensor:
    values = item.values if isinstance(item, HeadMask) else torch.as_tensor(item)
    if values.ndim != 2:
        raise ValueError(f"a head map must be [n_layers, n_heads], got shape {tuple(values.shape)}")
    return values.detach().float().cpu()


def head_heatmap(
    maps: HeadMask | Tensor | Mapping[str, HeadMask | Tensor],
    *,
    title: str = "",
    colorscale: str = "Viridis",
    zmin: float | int | None = None,
    zmax: float | int | None = None,
    columns: int = 3,
    marks: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    marks_name: str = "marked heads",
) -> go.Figure:
    """Heat map(s) of `[n_layers, n_heads]` values, layer on the y axis (layer 0 at the bottom);
    several named maps become a grid of panels sharing one colour scale. `marks` puts a red cross on
    the `(layer, head)` pairs listed for a panel's name (legend entry `marks_name`)."""
    named = dict(maps) if isinstance(maps, Mapping) else {"": maps}
    if not named:
        raise ValueError("nothing to plot")
    values = {name: _values(v) for name, v in named.items()}
    zmin = min(float(v.min()) for v in values.values()) if zmin is None else zmin
    zmax = max(float(v.max()) for v in values.values()) if zmax is None else zmax
    cols = min(columns, len(values))
    rows = -(-len(values) // cols)
    # Wide enough spacing that a panel's tick labels never run into its left neighbour.
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=list(values),
        horizontal_spacing=0.07,
        vertical_spacing=0.12 if rows > 1 else 0.08,
    )
    for i, (name, v) in enumerate(values.items()):
        fig.add_trace(
            go.Heatmap(
                z=v.numpy(),
                colorscale=colorscale,
                zmin=zmin,
                zmax=zmax,
                showscale=i == 0,
                name=name,
                hovertemplate="layer %{y}, head %{x}: %{z}<extra>" + name + "</extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
        heads = list((marks or {}).get(name, ()))
        if heads:
            fig.add_trace(
                go.Scatter(
                    x=[h for _, h in heads],
                    y=[l for l, _ in heads],
                    mode="markers",
                    name=marks_name,
                    marker=dict(symbol="x-thin", size=11, color="crimson", line=dict(width=2.5, color="crimson")),
                    showlegend=next(fig.select_traces(selector={"name": marks_name}), None) is None,
                    hovertemplate="layer %{y}, head %{x}<extra>" + marks_name + "</extra>",
                ),
                row=i // cols + 1,
                col=i % cols + 1,
            )
    # Axis titles on the outer panels only: an inner "layer" title would overlap the panel to its left.
    fig.update_xaxes(title_text="head", row=rows)
    fig.update_yaxes(title_text="layer", col=1)
    n_layers = next(iter(values.values())).shape[0]
    if n_layers <= 32:
        fig.update_yaxes(dtick=1)  # every layer labelled
    # The legend (marked heads only) sits at the bottom left, below the "head" axis titles: above the
    # panels it would sit under plotly's tool bar.
    fig.update_layout(
        title=title,
        height=max(320, 280 * rows) + (40 if marks else 0),
        legend=dict(orientation="h", x=0, xanchor="left", y=0.0, yanchor="bottom", yref="container") if marks else None,
        margin=dict(b=90) if marks else None,
    )
    return fig


def mask_heatmap(
    masks: HeadMask | Tensor | Mapping[str, HeadMask | Tensor],
    *,
    weights: bool = False,
    title: str = "",
    planted: Mapping[str, Sequence[tuple[int, int]]] | None = None,
) -> go.Figure:
    """Fig. 7: which heads each mask keeps (or their weights sigmoid(M) with `weights=True`).
    `planted` (task name -> heads, e.g. the organism's S_t) crosses out the heads a perfect mask
    removes, on the panel of the same name: a mask that found the pathway is white under every cross."""
    if weights:

        def pick(m):
            return m.weights if isinstance(m, HeadMask) else m

        masks = {k: pick(v) for k, v in masks.items()} if isinstance(masks, Mapping) else pick(masks)
    if planted is not None and not isinstance(masks, Mapping):
        masks = {next(iter(planted), ""): masks}
    return head_heatmap(
        masks,
        title=title or ("head weights σ(M)" if weights else "kept heads"),
        colorscale="Blues",
        zmin=0,
        zmax=1,
        marks=planted,
        marks_name="planted S_t (a perfect mask removes these)",
    )


def usage_heatmap(pathways: PathwayHeads, *, title: str = "") -> go.Figure:
    """How many masks keep each head."""
    return head_heatmap(
        pathways.counts,
        title=title or f"masks keeping each head (of {len(pathways.names)})",
        colorscale="Blues",
        zmin=0,
        zmax=len(pathways.names),
    )


def trajectory_figure(
    steps: Sequence[int], weights: Tensor, *, title: str = "", highlight: Sequence[tuple[int, int]] = ()
) -> go.Figure:
    """Fig. 3: sigmoid(M) of every head over training; heads kept at the end in blue, removed in red.
    Heads in `highlight` (e.g. those `analysis.trajectory_crossings` marks `came_back`: they joined
    the pathway and left it, or left and came back) are drawn bold on top, named in the legend."""
    weights = torch.as_tensor(weights).float()
    if weights.ndim != 3 or weights.shape[0] != len(steps):
        raise ValueError(f"weights must be [len(steps), n_layers, n_heads], got {tuple(weights.shape)}")
    n_layers, n_heads = weights.shape[1:]
    bold = {(int(l), int(h)) for l, h in highlight}
    outside = [(l, h) for l, h in bold if not (0 <= l < n_layers and 0 <= h < n_heads)]
    if outside:
        raise ValueError(f"highlight heads {outside} lie outside the {n_layers} x {n_heads} heads")
    fig = go.Figure()
    order = [i for i in range(n_layers * n_heads) if divmod(i, n_heads) not in bold]
    order += [i for i in range(n_layers * n_heads) if divmod(i, n_heads) in bold]
    for index in order:
        layer, head = divmod(index, n_heads)
        series = weights[:, layer, head]
        kept = bool(series[-1] >= 0.5)
        strong = (layer, head) in bold
        color = (
            ("rgb(31,119,180)" if kept else "rgb(214,39,40)")
            if strong
            else ("rgba(31,119,180,0.5)" if kept else "rgba(214,39,40,0.6)")
        )
        fig.add_trace(
            go.Scatter(
                x=list(steps),
                y=series.numpy(),
                mode="lines",
                name=f"L{layer}H{head}",
                showlegend=strong,
                line=dict(width=3 if strong else 1, color=color, dash="solid"),
                opacity=1.0 if strong or not bold else 0.35,
            )
        )
    fig.add_hline(y=0.5, line_dash="dot", line_color="gray")
    fig.update_layout(
        title=title or "head weights σ(M) during training", xaxis_title="step", yaxis_title="σ(M)", yaxis_range=[0, 1]
    )
    return fig


def jaccard_figure(matrix: pd.DataFrame, *, title: str = "", table: pd.DataFrame | None = None) -> go.Figure:
    """Heat map of a square Jaccard matrix (`analysis.jaccard_matrix`); with `table`
    (`analysis.jaccard_table` of the same masks) each pair's cell also shows its overlap p-value."""
    text = matrix.round(2).astype(str).to_numpy()
    if table is not None:
        where = {name: i for i, name in enumerate(matrix.index)}
        pairs = table[["mask_a", "mask_b", "jaccard", "p_value"]].itertuples(index=False, name=None)
        for a, b, jaccard, p_value in pairs:
            for i, j in ((where[a], where[b]), (where[b], where[a])):
                text[i, j] = f"{jaccard:.2f}<br>p={p_value:.1g}"
    fig = unit_heatmap(matrix, text, "Viridis")
    fig.update_layout(title=title or "Jaccard similarity of masks", yaxis_autorange="reversed")
    return fig


def cross_task_figure(table: pd.DataFrame, *, title: str = "", value: str = "strict") -> go.Figure:
    """Heat map of masks evaluated on other tasks (`mask_task` down, the evaluated `task` across,
    `value` in [0, 1] in each cell; the diagonal is each mask on its own task)."""
    matrix = table.pivot(index="mask_task", columns="task", values=value)
    order = list(dict.fromkeys(table.mask_task))
    matrix = matrix.reindex(index=order, columns=[t for t in order if t in matrix.columns])
    fig = unit_heatmap(matrix, matrix.round(2).astype(str).to_numpy(), "Blues")
    fig.update_layout(
        title=title or f"each task's mask on every task ({value})",
        xaxis_title="evaluated on",
        yaxis_title="mask of",
        yaxis_autorange="reversed",
    )
    return fig


def alpha_figure(table: pd.DataFrame, *, title: str = "") -> go.Figure:
    """Fig. 6: loss against alpha (columns `alpha`, `loss`)."""
    fig = go.Figure(go.Scatter(x=table.alpha, y=table.loss, mode="lines+markers"))
    fig.update_layout(
        title=title or "instructed answer loss vs α (heads outside the mask)",
        xaxis_title="α",
        yaxis_title="answer loss (nats/token)",
    )
    return fig


def attention_target_figure(table: pd.DataFrame, *, title: str = "") -> go.Figure:
    """Table 7 as bars: attention share on the target inside vs outside the mask, per setting."""
    fig = go.Figure(
        [
            go.Bar(name="heads in mask", x=table.setting, y=table.inside),
            go.Bar(name="heads outside mask", x=table.setting, y=table.outside),
        ]
    )
    fig.add_hline(y=1 / 3, line_dash="dot", line_color="gray", annotation_text="chance")
    fig.update_layout(
        barmode="group",
        title=title or "attention of the last token on the target word",
        yaxis_title="share of attention over the 3 words",
        yaxis_range=[0, 1],
    )
    return fig
