"""Writing figures: HTML always, PNG when a renderer (kaleido with a Chrome/Chromium) is available."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from .._io import atomic_write


@dataclass(frozen=True)
class SavedFigure:
    """Where a figure went; `png` is None when it could not be rendered, and `png_error` says why."""

    html: Path
    png: Path | None
    png_error: str | None = None


def save_figure(
    fig: go.Figure, path_stem: str | os.PathLike, *, png: bool = True, include_plotlyjs: bool | str = True
) -> SavedFigure:
    """Write `<path_stem>.html` (self-contained by default, so it opens offline) and, when `png`,
    try `<path_stem>.png` through kaleido. A missing renderer is reported, never raised: kaleido 1.x
    needs a Chrome or Chromium (e.g. Debian's `chromium` package, or `plotly_get_chrome`)."""
    stem = Path(path_stem)
    if stem.suffix in (".html", ".png"):
        stem = stem.with_suffix("")
    html = atomic_write(stem.with_suffix(".html"), lambda tmp: fig.write_html(str(tmp), include_plotlyjs=include_plotlyjs))
    if not png:
        return SavedFigure(html=html, png=None, png_error="PNG not requested")
    try:
        image = fig.to_image(format="png")
    except Exception as error:  # kaleido raises its own errors (no Chrome, renderer crash, ...)
        return SavedFigure(html=html, png=None, png_error=f"{type(error).__name__}: {error}".strip())
    path = atomic_write(stem.with_suffix(".png"), lambda tmp: tmp.write_bytes(image))
    return SavedFigure(html=html, png=path)
