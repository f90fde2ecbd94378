import re

import plotly.graph_objects as go
import pytest
import torch

from headsup_lens import HeadMask, layer_similarity, logit_lens, pathway_heads, removal_sweep
from headsup_lens.analysis import jaccard_matrix, jaccard_table, layer_states, random_order, sweep_similarity
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
    labels = list(sweep.tokens.label)
    assert [t.name for t in fig.data][: len(labels)] == labels
    assert list(fig.data[len(labels) - 1].y) == sweep.ranks[labels[-1]].tolist()
    # The step lines are named in the legend (no text written over the curves), and the x axis ends
    # at the last step.
    marks = [t.name for t in fig.data][len(labels) :]
    expected = [
        f"{what} (step {step})"
        for step, what in (
            (sweep.switch_step, "target becomes top-1"),
            (sweep.change_step, "continuation first changes"),
        )
        if step is not None
    ]
    assert marks == expected and not fig.layout.annotations
    assert list(fig.layout.xaxis.range) == [0, max(sweep.steps)]
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
    with_p = jaccard_figure(jaccard_matrix(masks), table=jaccard_table(masks)).data[0]
    assert with_p.text[0, 1] == with_p.text[1, 0] and "p=" in with_p.text[0, 1] and with_p.text[0, 0] == "1.0"
    weights = torch.rand(5, 2, 8)
    traj = trajectory_figure(list(range(0, 50, 10)), weights)
    assert len(traj.data) == 16 and list(traj.data[3].y) == pytest.approx(weights[:, 0, 3].tolist())
    marked = trajectory_figure(list(range(0, 50, 10)), weights, highlight=[(1, 2)])
    assert marked.data[-1].name == "L1H2" and marked.data[-1].showlegend and marked.data[-1].line.width == 3
    assert sum(bool(t.showlegend) for t in marked.data) == 1
    with pytest.raises(ValueError, match="highlight"):
        trajectory_figure(list(range(0, 50, 10)), weights, highlight=[(2, 0)])
    import pandas as pd

    assert list(alpha_figure(pd.DataFrame({"alpha": [0, 1], "loss": [2.0, 1.0]})).data[0].y) == [2.0, 1.0]
    bars = attention_target_figure(
        pd.DataFrame({"setting": ["original", "masked"], "inside": [0.3, 0.6], "outside": [0.2, 0.3]})
    )
    assert list(bars.data[0].y) == [0.3, 0.6] and list(bars.data[1].y) == [0.2, 0.3]


def external_sources(html: str) -> list[str]:
    """URLs an HTML page would load: script/img/link sources with a scheme, and any mention of plotly's
    CDN outside the inlined plotly.js bundle (whose only URL is the unused default for geo maps)."""
    import re

    from headsup_lens.plots._save import plotly_js_path

    html = html.replace(plotly_js_path().read_text(encoding="utf-8"), "")
    loads = re.findall(r'<(?:script|img|iframe)[^>]*\ssrc=["\']([^"\']*)', html)
    loads += re.findall(r'<link[^>]*\shref=["\']([^"\']*)', html)
    return [url for url in loads if "://" in url or url.startswith("//")] + (
        ["cdn.plot.ly"] if "cdn.plot.ly" in html else []
    )


def test_save_figure_shares_one_plotly_js_and_loads_no_url(tmp_path):
    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    a = save_figure(fig, tmp_path / "figs" / "a", png=False)
    b = save_figure(fig, tmp_path / "figs" / "b.html", png=False)
    assert (tmp_path / "figs" / "plotly.min.js").stat().st_size > 1_000_000
    for saved in (a, b):
        html = saved.html.read_text()
        assert '<script src="plotly.min.js"' in html.replace('charset="utf-8" ', "") or 'src="plotly.min.js"' in html
        assert not external_sources(html) and saved.html.stat().st_size < 100_000
    inline = save_figure(fig, tmp_path / "one", png=False, plotlyjs="inline")
    assert not external_sources(inline.html.read_text()) and inline.html.stat().st_size > 1_000_000
    assert not (tmp_path / "plotly.min.js").exists()
    with pytest.raises(ValueError, match="plotlyjs"):
        save_figure(fig, tmp_path / "x", plotlyjs="cdn")


def test_figures_in_a_tree_share_the_nearest_plotly_js_up_to_the_root(tmp_path):
    from headsup_lens.plots._save import plotly_js_path

    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    root = tmp_path / "figures"
    # No copy yet: the first figure deep in the tree writes the one copy at the root.
    deep = save_figure(fig, root / "model" / "run" / "step1" / "a", png=False, root=root)
    assert deep.plotly_js == (root / "plotly.min.js").resolve()
    assert (root / "plotly.min.js").read_bytes() == plotly_js_path().read_bytes()
    assert 'src="../../../plotly.min.js"' in deep.html.read_text()
    side = save_figure(fig, root / "b", png=False, root=root)
    assert 'src="plotly.min.js"' in side.html.read_text()
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("plotly.min.js")) == ["plotly.min.js"]
    # A nearer copy wins over the root's; a stale copy (another plotly version) is replaced.
    (root / "model" / "plotly.min.js").write_text("stale")
    near = save_figure(fig, root / "model" / "run" / "c", png=False, root=root)
    assert 'src="../plotly.min.js"' in near.html.read_text()
    assert (root / "model" / "plotly.min.js").stat().st_size == plotly_js_path().stat().st_size
    # The HTML loads the script it names: the path resolves from the figure's folder.
    for saved in (deep, side, near):
        src = re.search(r'src="([^"]*plotly\.min\.js)"', saved.html.read_text()).group(1)
        assert (saved.html.parent / src).resolve() == saved.plotly_js.resolve()
    # A figure outside its root is refused before anything is written.
    with pytest.raises(ValueError, match="not inside"):
        save_figure(fig, tmp_path / "elsewhere" / "d", png=False, root=root)
    assert not (tmp_path / "elsewhere").exists()


def test_png_renders_without_a_system_browser(tmp_path, monkeypatch):
    # The declared renderer brings its own Chromium: a PATH with no browser on it (only the two
    # tools kaleido's launcher script uses) still gives a PNG.
    import shutil

    from headsup_lens.plots import _save

    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dirname", "basename"):
        if shutil.which(tool):
            (tools / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(tools))
    _save._scope.cache_clear()
    saved = save_figure(go.Figure(go.Heatmap(z=[[0, 1], [1, 0]])), tmp_path / "heat")
    assert saved.png_error is None and saved.png.read_bytes()[:4] == b"\x89PNG"
    _save._scope.cache_clear()


def test_png_failure_is_one_line_and_writes_no_png(tmp_path, monkeypatch):
    from headsup_lens.plots import _save

    def broken(fig, **kwargs):
        raise RuntimeError("no renderer here\nsecond line\nthird")

    monkeypatch.setattr(_save, "render_png", broken)
    failed = save_figure(go.Figure(go.Scatter(y=[1])), tmp_path / "again")
    assert failed.png is None and failed.png_error == "RuntimeError: no renderer here second line third"
    assert failed.html.exists() and not list(tmp_path.glob("again*.png")) and not list(tmp_path.glob(".*tmp"))


def test_figure_details():
    from headsup_lens.plots._runs import log_ticks

    assert log_ticks(128) == [1, 2, 5, 10, 20, 50, 100, 200] and len(log_ticks(3)) == 4
    masks = {name: HeadMask(torch.ones(2, 4)) for name in "abcd"}
    fig = mask_heatmap(masks)
    titled = [axis for axis in fig.layout if axis.startswith("yaxis") and fig.layout[axis].title.text == "layer"]
    assert sorted(titled) == ["yaxis", "yaxis4"]  # first column only: no label runs into a neighbouring panel


def test_mask_heat_maps_mark_planted_heads_and_label_every_layer():
    masks = {"a": torch.ones(8, 16), "b": torch.ones(8, 16)}
    fig = mask_heatmap(masks, planted={"a": [(0, 1), (7, 15)]})
    crosses = [t for t in fig.data if t.type == "scatter"]
    assert len(crosses) == 1 and list(crosses[0].x) == [1, 15] and list(crosses[0].y) == [0, 7]
    assert crosses[0].xaxis == "x" and "planted" in crosses[0].name  # on panel "a" only
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis2.dtick == 1
