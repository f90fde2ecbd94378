"""The example notebooks: the two on the built-in organism execute top to bottom (as in CI), the
SmolLM2 tutorial in the slow suite (it trains a mask on a real model); all keep their outputs stored
for the site, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "experiments" / "notebooks"


ORGANISM = ["explore_pathways.ipynb", "reproduce_figures.ipynb"]
SMOLLM2 = "smollm2_end_to_end.ipynb"


def organism_ready() -> bool:
    from headsup_lens.models import builtin_model_dir

    directory = builtin_model_dir("organism")
    return directory is not None and (directory / "config.json").is_file() and (directory / "planted.json").is_file()


@pytest.mark.skipif(not organism_ready(), reason="the organism's weights are not in the package")
@pytest.mark.parametrize("name", ORGANISM)
def test_notebook_executes(name, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # The kernel inherits this: one thread is as fast for the organism's tiny ops and never oversubscribes
    # a shared CI machine (two threads on a busy 2-core machine ran ~10x slower).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    # Runs in a scratch folder so nothing lands in the repository; a failing cell raises CellExecutionError.
    nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # Figures are shown inline: plotly output bundles, not only text.
    assert any(
        "text/html" in o.get("data", {}) or "application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs
    )


@pytest.mark.parametrize("name", [*ORGANISM, SMOLLM2])
def test_notebook_figures_need_no_internet(name):
    """plotly.js is embedded in the notebook (renderer "notebook"), not loaded from a CDN."""
    source = (NOTEBOOKS / name).read_text()
    assert 'pio.renderers.default = \\"notebook\\"' in source
    assert "notebook_connected" not in source and "cdn" not in source.lower()


@pytest.mark.parametrize("name", [*ORGANISM, SMOLLM2])
def test_stored_outputs_show_offline_on_the_site(name):
    """The notebooks keep their outputs (the site's tutorials show them), without plotly.js itself (the site
    serves one copy), without scripts from a CDN and without progress widgets or their warning
    (`experiments/notebooks/store_outputs.py` writes them so)."""
    nbformat = pytest.importorskip("nbformat")
    path = NOTEBOOKS / name
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count is not None for cell in code)
    outputs = [o for cell in code for o in cell.get("outputs", [])]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("Plotly.newPlot" in h for h in html)
    text = path.read_text(encoding="utf-8")
    assert "plotly.js v" not in text and "application/vnd.jupyter.widget-view+json" not in text
    assert "IProgress" not in text and "://" not in text
    assert not [o for o in outputs if o.output_type == "error"]
    assert path.stat().st_size < 500_000


def test_the_explorer_is_stored_as_its_static_picture():
    """The pathway explorer's cell keeps the widget's own static picture (no live view, no script):
    the site shows the grid and the continuation instead of an empty cell."""
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOKS / "explore_pathways.ipynb", as_version=4)
    cell = next(c for c in notebook.cells if c.cell_type == "code" and "hl.explore(" in c.source)
    (output,) = cell.outputs
    picture = output["data"]["text/html"]
    assert 'class="hl-explorer hl-static"' in picture and "<script" not in picture
    assert picture.count("data-head=") == 8 * 16 and 'class="hl-generation"' in picture


def test_smollm2_tutorial_stored_its_bake_check():
    """The stored run of the SmolLM2 tutorial ended with the baked folder answering as the gated model:
    its text describes outputs that a run of the notebook produced, up to the last cell."""
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOKS / SMOLLM2, as_version=4)
    streams = [o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("equal greedy outputs: 20 of 20" in text for text in streams)
    assert any("trained in" in text for text in streams)


def smollm2_cached() -> bool:
    from headsup_lens.models._gguf import cached_model_dir

    return cached_model_dir("smollm2") is not None


@pytest.mark.slow
@pytest.mark.skipif(not smollm2_cached(), reason="smollm2 is not in the model cache (headsup fetch-model smollm2)")
def test_smollm2_tutorial_executes(tmp_path, monkeypatch):
    """The SmolLM2 tutorial top to bottom on the real model: it trains a mask (minutes on a CPU),
    evaluates it, sweeps, bakes it, and its own last check asserts that the baked folder in plain
    transformers answers every held-out word exactly as the gated model."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the model comes from the cache, nothing from a hub
    notebook = nbformat.read(NOTEBOOKS / SMOLLM2, as_version=4)
    # No limit per cell: the training cell's time depends on the machine and its load.
    nbclient.NotebookClient(
        notebook, timeout=None, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "equal greedy outputs: 20 of 20" in text
    assert sum("Plotly.newPlot" in o.get("data", {}).get("text/html", "") for o in outputs) >= 6
    assert (tmp_path / "baked" / "smollm2-opposites" / "config.json").is_file()


def test_the_smollm2_tutorials_command_line_runs_as_written(tmp_path, monkeypatch):
    """Its closing command lines: the snippet writes opposites.json from the notebook's PAIRS, the file
    reads as a task, and every `headsup` command parses (each writing one names its --out)."""
    import shlex

    nbformat = pytest.importorskip("nbformat")
    from headsup_lens import load_task
    from headsup_lens.cli._main import read_command_line

    notebook = nbformat.read(NOTEBOOKS / SMOLLM2, as_version=4)
    pairs_cell = next(c.source for c in notebook.cells if c.cell_type == "code" and "PAIRS = [" in c.source)
    closing = notebook.cells[-1].source.split("- The same steps from the command line", 1)[1]
    snippet = closing.split("write it with `", 1)[1].split("`", 1)[0]
    commands = [" ".join(c.split()) for c in re.findall(r"`(headsup [^`]+)`", closing)]
    assert [c.split()[1] for c in commands] == ["train", "evaluate", "bake"]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(pairs_cell.split("task = hl.Task")[0], namespace)
    exec(f"import json\n{snippet}", namespace)
    task = load_task("opposites.json")
    assert task.n_train + len(task.eval_pairs) == 50 and len(task.eval_pairs) == 25  # as the page says
    for command in commands:
        argv = shlex.split(command)[1:]
        args = read_command_line(argv)
        assert args.config.out, command
