"""Every page of the documentation site: its Python blocks run as written on the built-in organism.

A page's blocks run in order in one namespace (as a reader pasting them into a notebook would), in
a scratch folder. A block that must not run here says so in an HTML comment on the line before its
fence, with the reason:

    <!-- test: skip (loads SmolLM2: a 93 MB download on first use) -->
    <!-- test: needs-data -->           runs only when HEADSUP_DATA_DIR holds the paper's data

A shell block runs only when it asks to, with `<!-- test: run -->`: each `headsup ...` line runs as
a command of this checkout (`python3 -m headsup_lens ...`) in the page's scratch folder, in the
page's order with its Python blocks (a Python block may read what a command wrote).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^\n`]*)$")
MARK = re.compile(r"^\s*<!--\s*test:\s*(?P<kind>[\w-]+)\s*(?P<reason>.*?)\s*-->\s*$")
KINDS = ("skip", "needs-data", "run")
SHELL = ("bash", "sh", "console")


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


def runs(block: Block) -> bool:
    """A Python block not marked skip, or a shell block marked run."""
    if block.language in ("python", "py"):
        return block.mark != "skip"
    return block.language in SHELL and block.mark == "run"


def python_pages() -> list[Path]:
    """Pages with a block that runs here (a Python block not marked skip, a shell block marked run)."""
    return [p for p in pages() if any(runs(b) for b in blocks(p))]


def run_commands(block: Block, where: str) -> None:
    """Each line of a shell block, `headsup` run as this checkout's `python3 -m headsup_lens`."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for line in block.code.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "headsup", f"{where}: a shell block marked run holds headsup commands only: {line!r}"
        done = subprocess.run(
            [sys.executable, "-m", "headsup_lens", *words[1:]], env=environment, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{where}: {line!r} failed ({done.returncode}):\n{done.stdout}{done.stderr}"


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


def test_every_analysis_command_has_an_example_that_runs():
    page = DOCS / "guide" / "analyses.md"
    commands = {
        shlex.split(line)[1]
        for b in blocks(page)
        if runs(b) and b.language in SHELL
        for line in b.code.splitlines()
        if line.strip()
    }
    assert commands >= {"sweep", "lens", "similarity", "pathways"}
    influence = [b.code for b in blocks(page) if runs(b) and "--order influence" in b.code]
    assert influence, "guide/analyses.md: no example of headsup sweep --order influence that runs"


def test_the_guides_have_python_blocks_that_run():
    runnable = [b for p in python_pages() for b in blocks(p) if b.language in ("python", "py") and b.mark is None]
    assert len(runnable) >= 20
    assert {p.parent.name for p in python_pages()} >= {"guide"}


# Pages whose blocks train masks and run many commands (minutes each on a busy core): in the slow suite,
# which CI runs after the README's command (`pytest -m slow tests/docs/test_pages.py`).
SLOW_PAGES = {"guide/analyses.md", "guide/training.md"}


def page_params() -> list:
    names = [p.relative_to(DOCS).as_posix() for p in python_pages()]
    assert set(names) >= SLOW_PAGES, f"a slow page is gone: {sorted(SLOW_PAGES - set(names))}"
    return [
        pytest.param(page, id=name, marks=[pytest.mark.slow] if name in SLOW_PAGES else [])
        for page, name in zip(python_pages(), names)
    ]


@pytest.mark.parametrize("page", page_params())
def test_every_python_block_runs_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for block in blocks(page):
        if not runs(block):
            continue
        if block.mark == "needs-data" and not has_paper_data():
            continue
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if block.language in SHELL:
            run_commands(block, where)
        else:
            exec(compile(block.code, where, "exec"), namespace)
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
