"""Writing figures that work offline (and the tables beside them, `save_table`): HTML that loads no external URL, PNG from a renderer that
installs from the package index.

HTML figures share one `plotly.min.js`, referenced by relative path (so the tree can be moved or opened
from `file://`): the nearest copy in the figure's folder or an ancestor up to `root` (default: the
figure's own folder), else one written into `root`. A whole tree of figures (e.g. the committed
`figures/`) thus loads a single copy; `plotlyjs="inline"` gives one self-contained file.
PNGs are rendered by kaleido 0.2.1, which bundles its own headless Chromium (a declared dependency;
no browser to download). With kaleido >= 1 installed instead, plotly's own exporter is used, which
needs a Chrome or Chromium on the machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import pandas as pd
import plotly
import plotly.graph_objects as go

from .._io import atomic_write

PLOTLY_JS = "plotly.min.js"
PNG_INSTALL_HINT = "pip install kaleido==0.2.1"


@dataclass(frozen=True)
class SavedFigure:
    """Where a figure went; `png` is None when it was not written, and `png_error` says why (one line).
    `plotly_js` is the shared script the HTML loads (None when it is inline)."""

    html: Path
    png: Path | None
    png_error: str | None = None
    plotly_js: Path | None = None


def plotly_js_path() -> Path:
    """The plotly.js bundled with the installed plotly (the version its HTML expects)."""
    return Path(plotly.__file__).parent / "package_data" / PLOTLY_JS


def write_plotly_js(folder: str | os.PathLike) -> Path:
    """Copy plotly.js into `folder` unless an identical copy is already there; returns its path."""
    source, target = plotly_js_path(), Path(folder) / PLOTLY_JS
    if not (target.is_file() and target.stat().st_size == source.stat().st_size):
        payload = source.read_bytes()
        atomic_write(target, lambda tmp: tmp.write_bytes(payload))
    return target


def shared_plotly_js(folder: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Where the HTML figures of `folder` find their `plotly.min.js` (an absolute path): the nearest
    existing copy in `folder` or one of its ancestors up to and including `root`, else
    `root/plotly.min.js` (not written here). `root` defaults to `folder`; a `folder` outside `root`
    is a ValueError."""
    folder = Path(folder).resolve()
    top = folder if root is None else Path(root).resolve()
    if not folder.is_relative_to(top):
        raise ValueError(f"the figure folder {folder} is not inside the shared plotly.js root {top}")
    for ancestor in (folder, *folder.parents):
        if (ancestor / PLOTLY_JS).is_file():
            return ancestor / PLOTLY_JS
        if ancestor == top:
            break
    return top / PLOTLY_JS


def save_figure(
    fig: go.Figure,
    path_stem: str | os.PathLike,
    *,
    png: bool = True,
    plotlyjs: str = "shared",
    root: str | os.PathLike | None = None,
    served_from: str | os.PathLike | None = None,
) -> SavedFigure:
    """Write `<path_stem>.html` and, when `png`, `<path_stem>.png`.

    `plotlyjs="shared"` (default) references one `plotly.min.js` by relative path: the nearest copy in
    the figure's folder or an ancestor up to `root`, else one written into `root` (default `root`: the
    figure's folder, so one copy per folder). A copy that is not the installed plotly's is replaced.
    `served_from`: the folder the HTML will be read from when it is written elsewhere first (an
    output set's staging folder); the script is found and referenced from there.
    `"inline"` embeds the script (~4.8 MB per file). No HTML written here loads an external URL.
    A PNG that cannot be rendered is reported in `png_error`, never raised.
    """
    if plotlyjs not in ("shared", "inline"):
        raise ValueError(f"plotlyjs must be 'shared' or 'inline', not {plotlyjs!r}")
    stem = Path(path_stem)
    if stem.suffix in (".html", ".png"):
        stem = stem.with_suffix("")
    include: str | bool = True
    script = None
    if plotlyjs == "shared":
        folder = stem.parent if served_from is None else Path(served_from)
        script = shared_plotly_js(folder, root)  # checks `root` before anything is written
        write_plotly_js(script.parent)
        include = os.path.relpath(script, folder.resolve()).replace(os.sep, "/")
    html = atomic_write(stem.with_suffix(".html"), lambda tmp: fig.write_html(str(tmp), include_plotlyjs=include))
    if not png:
        return SavedFigure(html=html, png=None, png_error="PNG not requested", plotly_js=script)
    try:
        image = render_png(fig)
    except Exception as error:  # renderer missing or crashed: the HTML is still there
        return SavedFigure(html=html, png=None, png_error=_one_line(error), plotly_js=script)
    path = atomic_write(stem.with_suffix(".png"), lambda tmp: tmp.write_bytes(image))
    return SavedFigure(html=html, png=path, plotly_js=script)


def save_table(table: pd.DataFrame, path: str | os.PathLike, *, index: bool = False) -> Path:
    """Write `table` as CSV to `path` atomically (a crash leaves the previous file); returns the path."""
    return atomic_write(path, lambda tmp: table.to_csv(tmp, index=index))


def render_png(fig: go.Figure, *, scale: float = 1.0) -> bytes:
    """PNG bytes of `fig` at its layout size (700 x 500 when unset)."""
    width = fig.layout.width or 700
    height = fig.layout.height or 500
    version = _kaleido_version()
    if version is None:
        raise RuntimeError(f"no PNG renderer installed ({PNG_INSTALL_HINT})")
    if version.startswith("0."):
        return _scope().transform(fig.to_plotly_json(), format="png", width=width, height=height, scale=scale)
    return fig.to_image(format="png", width=width, height=height, scale=scale)


def _kaleido_version() -> str | None:
    try:
        return metadata.version("kaleido")
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def _scope():
    # One Chromium process for all figures of a run (~2 s to start, then ~0.1 s per figure); it renders
    # with the installed plotly's plotly.js, so PNGs match the HTML.
    from kaleido.scopes.plotly import PlotlyScope

    return PlotlyScope(plotlyjs=str(plotly_js_path()), mathjax=False)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 200:
        text = text[:197] + "..."
    if "Chrome" in text or "Chromium" in text:
        text = f"{text} (or {PNG_INSTALL_HINT}, which bundles its own)"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
