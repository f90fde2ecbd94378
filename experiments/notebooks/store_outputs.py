"""Execute the notebooks and store their outputs (the documentation site's tutorials show them as
stored).

    python experiments/notebooks/store_outputs.py            # every notebook of this folder
    python experiments/notebooks/store_outputs.py explore_pathways.ipynb
    nice python experiments/notebooks/store_outputs.py smollm2_end_to_end.ipynb --timeout 0

The organism notebooks run in about a minute each. `smollm2_end_to_end.ipynb` loads SmolLM2-135M-Instruct
(`headsup fetch-model smollm2` puts it in the model cache once) and trains a mask on a CPU: its
training cell alone takes minutes, so give it `--timeout 0` (no limit per cell) on a busy machine.

Each notebook runs top to bottom in a scratch folder (one torch thread), then three things are taken
out of its outputs before it is written back, so that the stored notebooks stay small and load
nothing from the internet:
- plotly.js itself (4.8 MB, which plotly's `notebook` renderer embeds with the first figure): the
  site serves one copy (`figures/plotly.min.js`), and a notebook run again embeds it again;
- the MathJax script the renderer loads from a CDN beside every figure (no figure uses TeX);
- progress-bar widgets (tqdm's, transient: they only showed a bar while a cell ran); a widget that
  carries a static picture of itself (the pathway explorer) keeps the picture, without its live view.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY_BUNDLE = re.compile(
    r"^\s*<script[^>]*>\s*window\.PlotlyConfig.*?</script>\s*<script[^>]*>/\*\*\s*\* plotly\.js", re.S
)
CDN_SCRIPT = re.compile(r'<script src="https?://[^"]*"></script>')


def clean(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without plotly.js, CDN scripts and progress widgets in its outputs."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET in data:
                if "text/html" not in data:
                    continue  # a progress bar: nothing to show once the cell has run
                del data[WIDGET]  # a widget with a static picture (the explorer): the site shows the picture
            html = data.get("text/html")
            if isinstance(html, str):
                if PLOTLY_BUNDLE.search(html):
                    continue
                data["text/html"] = CDN_SCRIPT.sub("", html)
            kept.append(output)
        cell["outputs"] = kept
    notebook.metadata.pop("widgets", None)
    return notebook


def store(path: Path, timeout: int | None = 600) -> None:
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as scratch:
        NotebookClient(
            notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": scratch}}
        ).execute()
    nbformat.write(clean(notebook), path)
    print(f"{path.name}: {path.stat().st_size / 1e3:.0f} kB with outputs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook files of this folder (default: all)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may run (default 600; 0: no limit)")
    args = parser.parse_args(argv)
    if args.timeout < 0:
        parser.error(f"--timeout must be >= 0 (0: no limit), got {args.timeout}")
    try:
        import ipywidgets  # noqa: F401  (tqdm draws its bars as widgets; without it the outputs hold a warning)
    except ImportError:
        parser.error('ipywidgets is missing: pip install -e ".[test]"')
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the kernel inherits it: the organism runs on one thread
    names = args.notebooks or sorted(p.name for p in HERE.glob("*.ipynb"))
    for name in names:
        store(HERE / Path(name).name, timeout=args.timeout or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
