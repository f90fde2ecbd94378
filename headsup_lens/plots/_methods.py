"""Figures of head-finding method comparisons: elicitation curves per method, ROC against planted heads."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import MethodComparison
from ._traces import add_row_traces, unit_heatmap


def elicitation_figure(comparison: MethodComparison, *, title: str = "") -> go.Figure:
    """Accuracy (left) and answer loss (right) without instruction as each method's heads are removed."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("accuracy without instruction", "answer loss (nats)"))
    seconds = comparison.summary.set_index("method").seconds
    for i, (name, curve) in enumerate(comparison.curves.groupby("method", sort=False)):
        color = _COLORS[i % len(_COLORS)]
        label = f"{name} ({seconds[name]:.0f} s)"
        dash = "dot" if name == "random" else "solid"
        panels = {1: curve.accuracy, 2: curve.answer_loss}
        add_row_traces(fig, curve.k, panels, name=label, mode="lines", line=dict(color=color, dash=dash))
    fig.update_xaxes(title_text="heads removed (k)")
    fig.update_layout(title=title or f"elicitation curves: {comparison.task}", height=420, width=1000)
    return fig


def roc_figure(comparison: MethodComparison, *, title: str = "") -> go.Figure:
    """ROC of each method's scores against the planted heads, AUROC in the legend."""
    points = comparison.roc()
    aurocs = comparison.summary.set_index("method").auroc
    fig = go.Figure()
    for i, (name, roc) in enumerate(points.groupby("method", sort=False)):
        fig.add_trace(
            go.Scatter(
                x=roc.fpr,
                y=roc.tpr,
                mode="lines",
                name=f"{name} (AUROC {aurocs[name]:.2f})",
                line=dict(color=_COLORS[i % len(_COLORS)], dash="dot" if name == "random" else "solid"),
            )
        )
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(color="gray", dash="dash")))
    fig.update_layout(
        title=title or f"planted heads recovered: {comparison.task}",
        xaxis_title="false positive rate",
        yaxis_title="true positive rate",
        height=480,
        width=620,
    )
    return fig


def auroc_table_figure(table: pd.DataFrame, *, title: str = "") -> go.Figure:
    """Heatmap of a (method x task) AUROC table."""
    fig = unit_heatmap(table, table.round(2).to_numpy(), "RdBu")
    fig.update_layout(title=title or "AUROC against planted heads", height=120 + 40 * len(table), width=900)
    return fig


_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22")
