"""Figures of the SFT paper's measurements (`headsup_lens.sft`): the correlation of pattern changes
(Fig. 2), the patterns' dynamics along SFT (Fig. 5) and pattern-guided data selection (Tables 2/3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..sft import CONDITIONS
from ._traces import add_row_traces


def change_correlation_figure(correlation: pd.DataFrame) -> go.Figure:
    """Heatmap of a task-by-task correlation matrix of pattern changes (`pattern_correlation`)."""
    heat = go.Figure(
        go.Heatmap(
            z=correlation.values,
            x=list(correlation.columns),
            y=list(correlation.index),
            zmin=-1,
            zmax=1,
            colorscale="RdBu",
            text=np.round(correlation.values, 2),
            texttemplate="%{text}",
        )
    )
    heat.update_layout(title="Correlation of pattern changes (after SFT - before)", width=700, height=650)
    return heat


def pattern_dynamics_figure(dynamics: pd.DataFrame, tasks: Sequence[str]) -> go.Figure:
    """Three panels over the SFT steps, one line per task: correlation and MSE of the pattern to the
    final one, and held-out accuracy when measured (`sft.pattern_dynamics`)."""
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("correlation to final pattern", "MSE to final pattern", "accuracy (held-out examples)"),
    )
    palette = px.colors.qualitative.Dark24
    for i, task in enumerate(tasks):
        d = dynamics[dynamics.task == task]
        panels = {col: d[key] for col, key in enumerate(("correlation", "mse", "accuracy"), start=1) if key in d}
        add_row_traces(fig, d.step, panels, name=task, mode="lines+markers", line_color=palette[i % len(palette)])
    fig.update_xaxes(title_text="SFT step")
    fig.update_layout(width=1400, height=480, title="Activation patterns along SFT")
    return fig


def data_selection_figure(runs: pd.DataFrame) -> go.Figure:
    """Answer loss and accuracy on each target, one box per condition (`sft.data_selection`'s runs)."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("answer loss on the target (nats, held-out)", "accuracy on the target"),
    )
    palette: dict[str, str] = dict(zip(CONDITIONS, px.colors.qualitative.Set1))
    for condition in [c for c in CONDITIONS if c in set(runs.condition)]:
        part = runs[runs.condition == condition]
        for row, metric in ((1, "answer_loss"), (2, "accuracy")):
            fig.add_trace(
                go.Box(
                    x=part.target.str.removeprefix("organism/"),
                    y=part[metric],
                    name=condition,
                    legendgroup=condition,
                    showlegend=row == 1,
                    boxpoints="all",
                    jitter=0.4,
                    pointpos=0,
                    marker_color=palette[condition],
                    line_width=1,
                ),
                row=row,
                col=1,
            )
    fig.update_layout(
        boxmode="group",
        width=1400,
        height=800,
        title="Pattern-guided data selection: SFT on the k candidates whose pattern change best matches "
        "the target's vs k random ones",
    )
    return fig
