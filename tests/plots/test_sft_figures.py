"""Figures of the SFT measurements: one trace per task or condition, the values of the tables."""

from __future__ import annotations

import pandas as pd

from headsup_lens.plots import change_correlation_figure, data_selection_figure, pattern_dynamics_figure, save_table


def test_change_correlation_heatmap_shows_the_matrix():
    names = ["a", "b"]
    correlation = pd.DataFrame([[1.0, -0.25], [-0.25, 1.0]], index=names, columns=names)
    heat = change_correlation_figure(correlation).data[0]
    assert (
        list(heat.x) == names and list(heat.y) == names and heat.z[0][1] == -0.25 and (heat.zmin, heat.zmax) == (-1, 1)
    )


def test_dynamics_has_a_line_per_task_and_panel():
    dynamics = pd.DataFrame(
        {
            "task": ["a", "a", "b", "b"],
            "step": [0, 10, 0, 10],
            "correlation": [0.5, 1.0, 0.2, 1.0],
            "mse": [0.1, 0.0, 0.3, 0.0],
            "accuracy": [0.0, 0.5, 0.1, 0.2],
        }
    )
    fig = pattern_dynamics_figure(dynamics, ["a", "b"])
    assert len(fig.data) == 6 and [t.name for t in fig.data] == ["a"] * 3 + ["b"] * 3
    assert list(fig.data[1].y) == [0.1, 0.0] and sum(t.showlegend for t in fig.data) == 2
    assert len(pattern_dynamics_figure(dynamics.drop(columns="accuracy"), ["a"]).data) == 2


def test_data_selection_boxes_per_condition_in_the_conditions_order(tmp_path):
    runs = pd.DataFrame(
        {
            "target": ["organism/t"] * 4,
            "condition": ["target", "none", "selected", "random"],
            "answer_loss": [0.5, 3.0, 1.0, 2.0],
            "accuracy": [0.9, 0.0, 0.4, 0.2],
        }
    )
    fig = data_selection_figure(runs)
    assert [t.name for t in fig.data] == ["none"] * 2 + ["random"] * 2 + ["selected"] * 2 + ["target"] * 2
    assert list(fig.data[0].x) == ["t"] and list(fig.data[0].y) == [3.0] and list(fig.data[1].y) == [0.0]
    path = save_table(runs, tmp_path / "runs.csv")
    assert pd.read_csv(path).equals(runs) and not list(tmp_path.glob("*.tmp"))
