"""Figure pieces several plots share: a heat map of values in [0, 1], and one line per panel of a row."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go


def unit_heatmap(table: pd.DataFrame, text, colorscale: str) -> go.Figure:
    """A heat map of a table of values in [0, 1] (rows down, columns across), `text` in each cell."""
    return go.Figure(
        go.Heatmap(
            z=table.to_numpy(),
            x=list(table.columns),
            y=list(table.index),
            zmin=0,
            zmax=1,
            colorscale=colorscale,
            text=text,
            texttemplate="%{text}",
        )
    )


def add_row_traces(fig: go.Figure, x, panels: Mapping[int, object], *, name: str, **style) -> None:
    """One line of `name` in each panel (column number to y values) of a one-row figure, sharing a
    legend entry shown once."""
    for i, (col, y) in enumerate(panels.items()):
        fig.add_trace(
            go.Scatter(x=x, y=y, name=name, legendgroup=name, showlegend=i == 0, **style),
            row=1,
            col=col,
        )
