"""Checks of the built site that `mkdocs build --strict` does not make: `python3 docs/_hooks/check_site.py SITE`.

- no unrendered template text: `{{` or `{%` in a page's text outside code, preformatted text and
  scripts (a page whose macros were not rendered passes the strict build);
- every internal link and anchor resolves: the page (or file) exists and, for `#anchor`, an element
  of that page has that id;
- every page is reachable from the navigation (the primary navigation of the home page);
- wide tables scroll inside their box: every page loads the site's extra stylesheet, whose rule
  gives tables `overflow-x: auto`, so nothing is clipped at the edge of the content column.

Prints one line per problem and exits 1 if there is any (0 otherwise).
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

EXTRA_CSS = "stylesheets/extra.css"
TABLE_RULE = re.compile(r"table[^{}]*\{[^}]*overflow-x:\s*auto", re.S)
TEMPLATE = re.compile(r"\{\{|\{%")
SKIPPED_TEXT = {"code", "pre", "script", "style", "textarea"}  # template text may be shown there
NOT_PAGES = {"404.html"}


class _Page(HTMLParser):
    """The parts of one HTML page that the checks read."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.stylesheets: list[str] = []
        self.nav_links: list[str] = []
        self.text_with_templates: list[str] = []
        self._skip = 0
        self._nav_depth = 0  # inside the primary navigation: depth of nested <nav>, else 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "name" in a:
            self.ids.add(a["name"])
        if tag in SKIPPED_TEXT:
            self._skip += 1
        if tag == "nav":
            if self._nav_depth:
                self._nav_depth += 1
            elif "md-nav--primary" in a.get("class", "").split():
                self._nav_depth = 1
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
            if self._nav_depth:
                self.nav_links.append(a["href"])
        if tag == "link" and a.get("rel") == "stylesheet":
            self.stylesheets.append(a.get("href", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED_TEXT and self._skip:
            self._skip -= 1
        if tag == "nav" and self._nav_depth:
            self._nav_depth -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and TEMPLATE.search(data):
            self.text_with_templates.append(" ".join(data.split())[:80])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _target(site: Path, page: Path, href: str) -> tuple[Path, str] | None:
    """The file an internal link points to and its anchor; None for an external link."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:", "data:")):
        return None
    path = unquote(parts.path)
    target = page if not path else (site / path.lstrip("/") if path.startswith("/") else page.parent / path)
    target = target.resolve()
    if target.is_dir() or path.endswith("/"):
        target = target / "index.html"
    return target, unquote(parts.fragment)


def check_site(site: Path) -> list[str]:
    """Every problem of the built site in `site`, one line each (empty: none)."""
    site = site.resolve()
    pages = sorted(p for p in site.rglob("*.html") if p.name not in NOT_PAGES and "assets" not in p.parts)
    parsed = {p: _parse(p) for p in pages}
    problems: list[str] = []
    css = site / EXTRA_CSS
    if not css.is_file() or not TABLE_RULE.search(css.read_text(encoding="utf-8")):
        problems.append(f"{EXTRA_CSS}: no rule that lets a wide table scroll (table {{ overflow-x: auto }})")
    for path, page in parsed.items():
        name = path.relative_to(site).as_posix()
        for text in page.text_with_templates:
            problems.append(f"{name}: unrendered template text: {text!r}")
        if not any(href.split("?")[0].endswith(EXTRA_CSS) for href in page.stylesheets):
            problems.append(f"{name}: does not load {EXTRA_CSS} (its tables would not scroll)")
        for href in sorted(set(page.links)):
            target = _target(site, path, href)
            if target is None:
                continue
            file, anchor = target
            if not file.is_file():
                problems.append(f"{name}: broken link {href!r}")
            elif anchor and file.suffix == ".html":
                ids = parsed[file].ids if file in parsed else _parse(file).ids
                if anchor not in ids:
                    problems.append(f"{name}: broken anchor {href!r}")
    home = site / "index.html"
    if home in parsed:
        in_nav = {home}
        for href in parsed[home].nav_links:
            target = _target(site, home, href)
            if target is not None:
                in_nav.add(target[0])
        for path in pages:
            if path not in in_nav:
                problems.append(f"{path.relative_to(site).as_posix()}: not reachable from the navigation")
    else:
        problems.append("index.html: no home page")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(  # noqa: T201 (a script: it talks on the terminal)
            "usage: python3 docs/_hooks/check_site.py SITE_DIR (a folder built by mkdocs build)", file=sys.stderr
        )
        return 2
    problems = check_site(Path(args[0]))
    for line in problems:
        print(line)  # noqa: T201
    print(f"site check: {len(problems)} problem(s)" if problems else "site check: no problems")  # noqa: T201
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
