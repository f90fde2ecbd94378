"""Figures of single runs: removal sweeps (Fig. 2, 8, 9), logit lens, layer similarity (Fig. 4, 5)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import LogitLens, RemovalSweep
from ._traces import add_row_traces


def _mark_steps(fig: go.Figure, sweep: RemovalSweep) -> None:
    """Vertical lines at the switch and first-change steps, explained in the legend (labels written
    on the plot overlapped each other and the curves when the steps are close)."""
    marks = [
        (sweep.switch_step, "dash", "green", "target becomes top-1"),
        (sweep.change_step, "dashdot", "gray", "continuation first changes"),
    ]
    for step, dash, color, what in marks:
        if step is None:
            continue
        fig.add_vline(x=step, line_dash=dash, line_color=color, line_width=2)
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                name=f"{what} (step {step})",
                line=dict(dash=dash, color=color, width=2),
                hoverinfo="skip",
            )
        )
    # The x axis ends at the last step (plotly's autorange pads past the number of heads).
    fig.update_xaxes(range=[0, max(sweep.steps)] if len(sweep.steps) > 1 else None)


def rank_figure(
    sweep: RemovalSweep, labels: Sequence[str] | None = None, *, log: bool = True, title: str = ""
) -> go.Figure:
    """Fig. 2: rank of each tracked token after each removal, rank 1 at the top (inverted axis)."""
    labels = list(sweep.tokens.label) if labels is None else list(labels)
    fig = go.Figure()
    for label in labels:
        kind = sweep.tokens.set_index("label").kind[label]
        fig.add_trace(
            go.Scatter(
                x=sweep.ranks.step,
                y=sweep.ranks[label],
                mode="lines",
                name=label,
                line=dict(width=3 if kind == "target" else 1.5, dash="solid" if kind == "target" else "dot"),
            )
        )
    _mark_steps(fig, sweep)
    worst = float(sweep.ranks[labels].to_numpy().max()) if labels else 1.0
    # An explicit inverted range: rank 1 at the top (plotly's reversed autorange pads log axes oddly).
    top_to_bottom = [math.log10(worst) + 0.05, -0.05] if log else [worst + 0.5, 0.5]
    fig.update_yaxes(range=top_to_bottom, type="log" if log else "linear", title_text="rank (1 = next token)")
    if log:  # explicit 1-2-5 ticks: the default minor labels of a reversed log axis collide
        ticks = log_ticks(worst)
        fig.update_yaxes(tickvals=ticks, ticktext=[f"{t:,}" for t in ticks])
    fig.update_layout(title=title or "token ranks during one-by-one head removal", xaxis_title="heads removed")
    return fig


def log_ticks(worst: float | int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to the first tick at or above `worst` (at least 1, 2, 5, 10)."""
    ticks, power = [], 1
    while not ticks or ticks[-1] < max(worst, 10):
        ticks += [power, 2 * power, 5 * power]
        power *= 10
    while len(ticks) > 4 and ticks[-2] >= worst:
        ticks.pop()
    return ticks


def logit_figure(sweep: RemovalSweep, labels: Sequence[str] | None = None, *, title: str = "") -> go.Figure:
    """Logits of the tracked tokens after each removal."""
    labels = list(sweep.tokens.label) if labels is None else list(labels)
    fig = go.Figure([go.Scatter(x=sweep.logits.step, y=sweep.logits[l], mode="lines", name=l) for l in labels])
    _mark_steps(fig, sweep)
    fig.update_layout(
        title=title or "token logits during one-by-one head removal", xaxis_title="heads removed", yaxis_title="logit"
    )
    return fig


def generation_table(sweep: RemovalSweep, *, title: str = "") -> go.Figure:
    """The greedy continuation at every step where it changes (and at step 0)."""
    changes = sweep.changes()
    fig = go.Figure(
        go.Table(
            columnwidth=[1, 8],
            header=dict(values=["heads removed", "greedy continuation"], align="left", height=28),
            cells=dict(values=[changes.step, [repr(g) for g in changes.generation]], align="left", height=26),
        )
    )
    # Tall enough for every row: plotly tables scroll inside a fixed height, which hides rows in PNGs.
    fig.update_layout(
        title=title or "continuations where they change",
        height=max(250, 130 + 28 + 27 * len(changes)),
        margin=dict(t=60, b=20, l=20, r=20),
    )
    return fig


def logit_lens_figure(lens: LogitLens, stream: str = "resid", *, title: str = "") -> go.Figure:
    """Heat map: layer (y) by rank (x), coloured by probability, labelled with the token."""
    table = lens.table[lens.table.stream == stream]
    if table.empty:
        raise ValueError(f"the logit lens has no stream {stream!r}")
    probs = table.pivot(index="layer", columns="rank", values="prob")
    tokens = table.pivot(index="layer", columns="rank", values="token")
    fig = go.Figure(
        go.Heatmap(
            z=probs.to_numpy(),
            x=[f"#{r}" for r in probs.columns],
            y=list(probs.index),
            text=tokens.map(repr).to_numpy(),
            texttemplate="%{text}",
            colorscale="Blues",
            zmin=0,
            hovertemplate="layer %{y} %{x}: %{text} p=%{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(title=title or f"logit lens ({stream})", xaxis_title="rank", yaxis_title="layer")
    return fig


def similarity_figure(tables: Mapping[str, pd.DataFrame], *, title: str = "") -> go.Figure:
    """Fig. 4: cosine similarity per layer for several comparisons (tables from `layer_similarity`),
    attention output on the left, block output on the right."""
    if not tables:
        raise ValueError("nothing to plot")
    fig = make_subplots(rows=1, cols=2, subplot_titles=["attention output", "block output"], shared_yaxes=True)
    for i, (name, table) in enumerate(tables.items()):
        color = f"hsl({(i * 67) % 360},60%,45%)"
        panels = {1: table.attn_out, 2: table.block_out}
        add_row_traces(fig, table.layer, panels, name=name, mode="lines+markers", line=dict(color=color))
    fig.update_xaxes(title_text="layer")
    fig.update_yaxes(title_text="cosine similarity", col=1)
    fig.update_layout(title=title or "similarity at the last input position")
    return fig


def sweep_similarity_figure(table: pd.DataFrame, column: str = "block_out", *, title: str = "") -> go.Figure:
    """Fig. 5: cosine similarity (to a reference run) per step (x) and layer (y)."""
    grid = table.pivot(index="layer", columns="step", values=column)
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(), x=list(grid.columns), y=list(grid.index), colorscale="RdBu", zmid=0, zmin=-1, zmax=1
        )
    )
    fig.update_layout(
        title=title or f"similarity of {column} to the reference along the removal sweep",
        xaxis_title="heads removed",
        yaxis_title="layer",
    )
    return fig
