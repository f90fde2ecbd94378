import plotly.graph_objects as go
import pytest
import torch

from headsup_lens import HeadMask, layer_similarity, logit_lens, pathway_heads, removal_sweep
from headsup_lens.analysis import jaccard_matrix, layer_states, random_order, sweep_similarity
from headsup_lens.plots import (
    alpha_figure,
    attention_target_figure,
    generation_table,
    jaccard_figure,
    logit_figure,
    logit_lens_figure,
    mask_heatmap,
    rank_figure,
    save_figure,
    similarity_figure,
    sweep_similarity_figure,
    trajectory_figure,
    usage_heatmap,
)

from ..conftest import random_mask


@pytest.fixture(scope="module")
def sweep(llama):
    return removal_sweep(llama, "cat", random_order(llama), target_tokens=["x"], max_new_tokens=4, record_layers=True)


def test_sweep_figures_show_the_sweep(sweep):
    fig = rank_figure(sweep)
    low, high = fig.layout.yaxis.range  # inverted: the worst rank at the bottom, rank 1 at the top
    assert fig.layout.yaxis.type == "log" and low > high and high < 0 < low
    assert [t.name for t in fig.data] == list(sweep.tokens.label)
    assert list(fig.data[-1].y) == sweep.ranks[sweep.tokens.label.iloc[-1]].tolist()
    assert list(logit_figure(sweep).data[0].y) == pytest.approx(sweep.logits[sweep.tokens.label.iloc[0]].tolist())
    table = generation_table(sweep)
    assert list(table.data[0].cells.values[0]) == sweep.changes().step.tolist()


def test_similarity_and_lens_figures(llama, sweep):
    tables = {"self": layer_similarity(llama, "cat", "cat"), "other": layer_similarity(llama, "cat", "dog")}
    fig = similarity_figure(tables)
    assert len(fig.data) == 4 and list(fig.data[1].y) == tables["self"].block_out.tolist()
    heat = sweep_similarity_figure(sweep_similarity(sweep, layer_states(llama, "cat")))
    assert heat.data[0].z.shape == (llama.cfg.n_layers, len(sweep.steps))
    lens = logit_lens(llama, "cat", k=3)
    lens_fig = logit_lens_figure(lens)
    assert lens_fig.data[0].z.shape == (llama.cfg.n_layers, 3)
    with pytest.raises(ValueError, match="stream"):
        logit_lens_figure(lens, stream="mlp")


def test_head_figures(llama):
    masks = {"a": HeadMask(random_mask(llama, seed=1)), "b": HeadMask(random_mask(llama, seed=2))}
    fig = mask_heatmap(masks)
    assert len(fig.data) == 2 and (fig.data[1].z == masks["b"].values.numpy()).all()
    usage = usage_heatmap(pathway_heads(masks))
    assert (usage.data[0].z == (masks["a"].values + masks["b"].values).numpy()).all()
    assert jaccard_figure(jaccard_matrix(masks)).data[0].z[0, 1] == pytest.approx(masks["a"].jaccard(masks["b"]))
    weights = torch.rand(5, 2, 8)
    traj = trajectory_figure(list(range(0, 50, 10)), weights)
    assert len(traj.data) == 16 and list(traj.data[3].y) == pytest.approx(weights[:, 0, 3].tolist())
    import pandas as pd

    assert list(alpha_figure(pd.DataFrame({"alpha": [0, 1], "loss": [2.0, 1.0]})).data[0].y) == [2.0, 1.0]
    bars = attention_target_figure(pd.DataFrame({"setting": ["original", "masked"], "inside": [0.3, 0.6], "outside": [0.2, 0.3]}))
    assert list(bars.data[0].y) == [0.3, 0.6] and list(bars.data[1].y) == [0.2, 0.3]


def test_save_figure_writes_html_and_reports_png_failures(tmp_path, monkeypatch):
    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    saved = save_figure(fig, tmp_path / "sub" / "plot")
    assert "<html>" in saved.html.read_text() and saved.html.name == "plot.html"
    assert (saved.png is not None and saved.png.read_bytes()[:4] == b"\x89PNG") or saved.png_error
    def broken(*args, **kwargs):
        raise RuntimeError("no Chrome here")

    monkeypatch.setattr(go.Figure, "to_image", broken)
    failed = save_figure(fig, tmp_path / "again")
    assert failed.png is None and "no Chrome" in failed.png_error and failed.html.exists()
    assert not list(tmp_path.glob("again*.png")) and not list(tmp_path.glob(".*tmp"))
