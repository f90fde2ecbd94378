"""A self-contained HTML report: headings, notes, tables and plotly figures in one file."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from .._io import atomic_write_text

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.45em; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
.note { color: #555; } pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; }
.caption { color: #444; font-size: 0.9em; margin: 0.2em 0 1.6em; max-width: 62em; }
.intro { font-size: 1.02em; max-width: 62em; }
.table-wrap { overflow-x: auto; max-width: 100%; }
.nowrap td { white-space: nowrap; }
"""


@dataclass
class Report:
    """Collects sections in order; `write` embeds plotly.js once so the file works offline."""

    title: str
    _parts: list[str] = field(default_factory=list)
    _n_figures: int = 0

    def heading(self, text: str) -> None:
        """Add a section heading."""
        self._parts.append(f"<h2>{html.escape(text)}</h2>")

    def intro(self, text: str) -> None:
        """Add an introductory paragraph (plain text, escaped)."""
        self._parts.append(f'<p class="intro">{html.escape(text)}</p>')

    def note(self, text: str) -> None:
        """Add a note paragraph (plain text, escaped)."""
        self._parts.append(f'<p class="note">{html.escape(text)}</p>')

    def caption(self, text: str) -> None:
        """A short explanation under the table or figure just added: what it shows, units, good and bad values."""
        self._parts.append(f'<p class="caption">{html.escape(text)}</p>')

    def code(self, text: str) -> None:
        """Add a preformatted block (a command, a generation), escaped."""
        self._parts.append(f"<pre>{html.escape(text)}</pre>")

    def table(
        self,
        frame: pd.DataFrame,
        float_format: str = "{:.3f}",
        index: bool = False,
        caption: str | None = None,
        nowrap: bool = False,
    ) -> None:
        """Add `frame` as an HTML table (wide ones scroll), floats written with `float_format` (whole-number
        columns as integers), and an optional caption. `nowrap`: no cell breaks over lines (numbers with
        their intervals stay on one line; the table scrolls instead)."""
        formatters = {
            c: _formatter(frame[c], float_format) for c in frame.columns if pd.api.types.is_float_dtype(frame[c])
        }
        table = frame.to_html(index=index, formatters=formatters, border=0, na_rep="—")
        wrap = "table-wrap nowrap" if nowrap else "table-wrap"
        self._parts.append(f"<div class='{wrap}'>{table}</div>")  # a wide table scrolls, the page does not
        if caption:
            self.caption(caption)

    def figure(self, fig: go.Figure, caption: str | None = None) -> None:
        """Add a plotly figure (the first one carries plotly.js inline) and an optional caption."""
        include: bool | str = "inline" if self._n_figures == 0 else False  # plotly.js once, in the first figure
        self._parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=include))  # pyright: ignore[reportArgumentType] (plotly's stub says bool; str modes are documented)
        self._n_figures += 1
        if caption:
            self.caption(caption)

    def to_html(self) -> str:
        """The whole report as one HTML document."""
        body = "\n".join(self._parts)
        return (
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(self.title)}</h1>\n{body}\n</body></html>"
        )

    def write(self, path: str | os.PathLike) -> Path:
        """Write the report to `path` atomically; returns the path."""
        return atomic_write_text(path, self.to_html())


def format_p_value(p: float) -> str:
    """A p-value for a table: three decimals, "< 0.001" below that (never "0.000"), "—" when missing."""
    if pd.isna(p):
        return "—"
    return "< 0.001" if p < 0.0005 else f"{p:.3f}"


def _formatter(column: pd.Series, float_format: str):
    """Counts stored as floats (`n_kept` is NaN on control rows) print as integers: 128, not 128.000.
    A column counts when every value is whole and one reaches 2 (shares and p-values stay in [0, 1])."""
    values = column.dropna()
    whole = bool((values == values.round()).all()) and bool((values.abs() < 1e15).all())
    if len(values) and whole and float(values.abs().max()) >= 2:
        return "{:.0f}".format
    return float_format.format
