"""The committed figures/ tree: one plotly.min.js serves every HTML figure, and each figure finds it."""

import re
from pathlib import Path

FIGURES = Path(__file__).resolve().parents[2] / "figures"


def test_one_plotly_js_serves_every_committed_html_figure():
    copies = sorted(FIGURES.rglob("plotly.min.js"))
    assert copies == [FIGURES / "plotly.min.js"]
    pages = sorted(FIGURES.rglob("*.html"))
    assert pages
    for page in pages:
        sources = re.findall(r'<script[^>]*\ssrc="([^"]*)"', page.read_text(encoding="utf-8"))
        assert len(sources) == 1, page
        assert "://" not in sources[0] and (page.parent / sources[0]).resolve() == copies[0], page
