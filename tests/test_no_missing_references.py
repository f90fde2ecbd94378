"""Docstrings and docs cite the paper by section and table, never files that are not in the repository."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_reference_to_files_outside_the_repository():
    outside = ("PAPER.md", "DESIGN.md", "STYLE.md")
    found = []
    for folder in ("headsup_lens", "docs", "experiments"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".ipynb") and path.is_file():
                text = path.read_text(encoding="utf-8")
                found += [f"{path.relative_to(ROOT)}: {name}" for name in outside if name in text]
    found += [f"README.md: {name}" for name in outside if name in (ROOT / "README.md").read_text(encoding="utf-8")]
    assert not found, found
