"""The check of the built site (docs/_hooks/check_site.py), on small hand-made sites: each problem it
looks for is found, and a clean site passes. CI runs it on the real site after `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSS = ".md-typeset table:not([class]) {\n  display: block;\n  overflow-x: auto;\n}\n"


def load():
    spec = importlib.util.spec_from_file_location("docs_hooks_check_site", ROOT / "docs" / "_hooks" / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page(nav: str, body: str, css: str = "../stylesheets/extra.css") -> str:
    return (
        f'<html><head><link rel="stylesheet" href="{css}"></head><body>'
        f'<nav class="md-nav md-nav--primary">{nav}</nav><article>{body}</article></body></html>'
    )


@pytest.fixture
def site(tmp_path):
    """A two-page site: the home page and guide/, both in the navigation, linking each other."""
    (tmp_path / "stylesheets").mkdir()
    (tmp_path / "stylesheets" / "extra.css").write_text(CSS)
    (tmp_path / "guide").mkdir()
    home_nav = '<a href=".">Home</a><a href="guide/">Guide</a>'
    (tmp_path / "index.html").write_text(
        page(home_nav, '<h2 id="start">Start</h2><a href="guide/#gates">gates</a>', css="stylesheets/extra.css")
    )
    guide = page('<a href="../">Home</a><a href="./">Guide</a>', '<h2 id="gates">Gates</h2><code>{{ x }}</code>')
    (tmp_path / "guide" / "index.html").write_text(guide)
    return tmp_path


def test_a_clean_site_passes(site):
    checker = load()
    assert checker.check_site(site) == []
    assert checker.main([str(site)]) == 0


def test_unrendered_macros_are_found_outside_code(site):
    guide = site / "guide" / "index.html"
    guide.write_text(guide.read_text().replace("</article>", '<p>{{ table("figures/bench/x.csv") }}</p></article>'))
    problems = load().check_site(site)
    assert len(problems) == 1 and "guide/index.html: unrendered template text" in problems[0]
    assert "table(" in problems[0]


def test_broken_links_and_anchors_are_found(site):
    home = site / "index.html"
    home.write_text(
        home.read_text()
        .replace("guide/#gates", "guide/#nowhere")
        .replace("</article>", '<a href="gone/">x</a></article>')
    )
    problems = load().check_site(site)
    assert any("broken anchor 'guide/#nowhere'" in p for p in problems)
    assert any("broken link 'gone/'" in p for p in problems)
    assert load().main([str(site)]) == 1


def test_a_page_missing_from_the_navigation_is_found(site):
    (site / "orphan").mkdir()
    (site / "orphan" / "index.html").write_text(page('<a href="../">Home</a>', "<p>alone</p>"))
    assert load().check_site(site) == ["orphan/index.html: not reachable from the navigation"]


def test_tables_must_be_able_to_scroll(site):
    (site / "stylesheets" / "extra.css").write_text(".md-typeset table { border: 0 }\n")
    assert any("no rule that lets a wide table scroll" in p for p in load().check_site(site))
    guide = site / "guide" / "index.html"
    guide.write_text(guide.read_text().replace("../stylesheets/extra.css", "../other.css"))
    (site / "stylesheets" / "extra.css").write_text(CSS)
    assert load().check_site(site) == [
        "guide/index.html: does not load stylesheets/extra.css (its tables would not scroll)"
    ]


def test_the_real_stylesheet_has_the_rule_and_every_page_with_macros_renders_them():
    checker = load()
    assert checker.TABLE_RULE.search((ROOT / "docs" / checker.EXTRA_CSS).read_text())
    for path in sorted((ROOT / "docs").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        body = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)  # template text shown as code is fine
        if re.search(r"\{\{|\{%", body):
            assert re.match(r"---\n(.*\n)*?render_macros: true\n(.*\n)*?---\n", text), (
                f"{path.relative_to(ROOT)} calls macros but lacks `render_macros: true` in its front matter"
            )
