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


def tracked(root: Path) -> list[Path]:
    """The files git tracks under `root` (the working tree's files when git is not there)."""
    import subprocess

    done = subprocess.run(["git", "ls-files", "-z", "--", str(root)], capture_output=True, cwd=root, check=False)
    if done.returncode != 0:
        return [p for p in root.rglob("*") if p.is_file()]
    names = [name for name in done.stdout.decode().split("\0") if name]
    return [root / name for name in names if (root / name).is_file()]


def test_long_tables_are_stored_gzipped_and_no_resume_state_is_committed():
    """Tables of every output or every step over 100 KiB are `.csv.gz` (`experiments/compress_tables.py`),
    and a finished training run (its final mask written) keeps its masks, logits and history but not its
    resume state; a run still going keeps it, so that it resumes from the committed folder."""
    files = tracked(FIGURES)
    long = re.compile(r"generations|history|similarity")
    plain = [p for p in files if p.suffix == ".csv" and long.search(p.name) and p.stat().st_size > 100 * 1024]
    assert not plain, f"store these gzipped (python experiments/compress_tables.py): {plain}"
    finished = [p for p in files if p.name == "state.pt" and (p.parents[1] / "mask.safetensors").is_file()]
    assert not finished, f"finished runs need no resume state: {finished}"


def test_the_tracked_tree_stays_under_40_mb():
    total = sum(p.stat().st_size for p in tracked(FIGURES.parent))
    assert total <= 40 * 10**6, f"{total / 10**6:.1f} MB tracked"


def test_figure_renders_stay_local():
    """The pages embed each figure's HTML; its PNG render (written beside it by the scripts) is not
    committed (`figures/.gitignore`)."""
    renders = [p for p in tracked(FIGURES) if p.suffix == ".png"]
    assert not renders, f"PNG renders are not committed: {renders[:5]}"
