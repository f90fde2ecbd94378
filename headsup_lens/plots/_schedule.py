"""The schedule curve: a run's mask read at several training steps (`evaluation.schedule_curve`)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def schedule_curve_figure(table: pd.DataFrame, *, title: str = "") -> go.Figure:
    """Accuracy (the paper's matcher and the strict one, 95% Wilson intervals, echo counts on hover)
    and answer loss of a `schedule_curve` table against the training step (log axis)."""
    missing = {"step", "accuracy", "strict", "answer_nll", "echo", "n"} - set(table.columns)
    if missing:
        raise ValueError(f"not a schedule_curve table: no column {sorted(missing)}")
    fig = make_subplots(rows=1, cols=2, subplot_titles=["accuracy (no instruction, masked)", "answer loss (nats)"])
    for column, name in (("accuracy", "paper matcher"), ("strict", "strict")):
        fig.add_trace(
            go.Scatter(
                x=table.step,
                y=table[column],
                mode="lines+markers",
                name=name,
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=table[f"{column}_high"] - table[column],
                    arrayminus=table[column] - table[f"{column}_low"],
                ),
                text=[f"{e} echoes" for e in table.echo],
            ),
            row=1,
            col=1,
        )
    fig.add_trace(go.Scatter(x=table.step, y=table.answer_nll, mode="lines+markers", name="answer loss"), row=1, col=2)
    fig.update_xaxes(type="log", title_text="training step")
    fig.update_yaxes(range=[0, 1], row=1, col=1)
    n = int(table.n.iloc[0]) if len(table) else 0
    fig.update_layout(title=title or f"schedule curve (n = {n} held-out examples, 95% Wilson intervals)")
    return fig
