"""Every page of the documentation site: its Python blocks run as written on the built-in organism.

A page's blocks run in order in one namespace (as a reader pasting them into a notebook would), in
a scratch folder. A block that must not run here says so in an HTML comment on the line before its
fence, with the reason:

    <!-- test: skip (loads SmolLM2: a 93 MB download on first use) -->
    <!-- test: needs-data -->           runs only when HEADSUP_DATA_DIR holds the paper's data
"""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^\n`]*)$")
MARK = re.compile(r"^\s*<!--\s*test:\s*(?P<kind>[\w-]+)\s*(?P<reason>.*?)\s*-->\s*$")
KINDS = ("skip", "needs-data")


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    mark: str | None
    reason: str


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, info = fence["indent"], fence["info"].strip()
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j])
            j += 1
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = MARK.match(previous)
        code = textwrap.dedent("\n".join(line[len(indent) :] if line.startswith(indent) else line for line in body))
        found.append(
            Block(
                page,
                i + 1,
                info.split()[0] if info else "",
                code,
                mark["kind"] if mark else None,
                mark and mark["reason"],
            )
        )
        i = j + 1
    return found


def python_pages() -> list[Path]:
    """Pages with a Python block that runs here (not marked skip)."""
    return [p for p in pages() if any(b.language in ("python", "py") and b.mark != "skip" for b in blocks(p))]


def has_paper_data() -> bool:
    data = os.environ.get("HEADSUP_DATA_DIR")
    return bool(data) and Path(data, "function_vectors").is_dir()


def test_every_mark_is_known_and_every_skip_says_why():
    for page in pages():
        for block in blocks(page):
            where = f"{page.relative_to(ROOT)}:{block.line}"
            if block.mark is not None:
                assert block.mark in KINDS, f"{where}: unknown mark {block.mark!r} (known: {KINDS})"
            if block.mark == "skip":
                assert re.fullmatch(r"\(.{5,}\)", block.reason or ""), f"{where}: a skipped block says why: (reason)"


def test_the_guides_have_python_blocks_that_run():
    runnable = [b for p in python_pages() for b in blocks(p) if b.language in ("python", "py") and b.mark is None]
    assert len(runnable) >= 20
    assert {p.parent.name for p in python_pages()} >= {"guide"}


@pytest.mark.parametrize("page", python_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_python_block_runs_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for block in blocks(page):
        if block.language not in ("python", "py") or block.mark == "skip":
            continue
        if block.mark == "needs-data" and not has_paper_data():
            continue
        exec(compile(block.code, f"{page.relative_to(ROOT)}:{block.line}", "exec"), namespace)
        ran += 1
    assert ran or not has_paper_data(), f"{page.relative_to(ROOT)}: no block ran"


def test_every_hl_name_in_the_docs_exists():
    import headsup_lens as hl

    for page in pages():
        text = "\n".join(b.code for b in blocks(page) if b.language in ("python", "py"))
        for dotted in sorted(set(re.findall(r"\bhl\.([A-Za-z_][\w.]*)", text))):
            target = hl
            for part in dotted.split("."):
                if not hasattr(target, part):
                    pytest.fail(f"{page.relative_to(ROOT)} uses hl.{dotted}, which does not exist")
                target = getattr(target, part)


def test_every_public_subpackage_and_module_has_an_api_page():
    package = ROOT / "headsup_lens"
    subpackages = {p.parent.name for p in package.glob("*/__init__.py") if not p.parent.name.startswith("_")}
    modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}  # options
    public = (subpackages | modules) - {"cli"}
    pages_ = {p.stem for p in (DOCS / "reference" / "api").glob("*.md")}
    assert public <= pages_, f"API pages missing for {sorted(public - pages_)}"
    nav = (ROOT / "mkdocs.yml").read_text()
    for name in public:
        assert (DOCS / "reference" / "api" / f"{name}.md").read_text().strip() == f"::: headsup_lens.{name}"
        assert f"reference/api/{name}.md" in nav, f"reference/api/{name}.md is not in the site's nav"
