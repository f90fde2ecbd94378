"""Build-time pieces of the documentation site (mkdocs `hooks:`).

- the tutorials are the notebooks of `experiments/notebooks/`, shown with their stored outputs;
- `reference/cli.md` is generated from the command dataclasses: the text of every `--help`;
- the one `figures/plotly.min.js` is copied to `assets/` and loaded by the pages that show plotly
  figures (the notebooks' stored outputs and the committed figures embedded by `figure(...)`);
- a results page that states a number outside the macros fails the build (`macros.hand_typed_numbers`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "experiments" / "notebooks"
TUTORIALS = "notebooks"  # site folder of the notebooks: experiments/notebooks/X.ipynb -> notebooks/X/
CLI_PAGE = "reference/cli.md"
HELP_WIDTH = 100  # tyro wraps --help to $COLUMNS: the page shows what a 100-column terminal shows

log = logging.getLogger("mkdocs.hooks.site")

# The site documents the checkout it is built from, also when another copy of the package is installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


macros = _load("macros")
cli_reference = _load("cli_reference")


@event_priority(100)  # before mkdocs-jupyter looks for notebooks among the files
def on_files(files: Files, config) -> Files:
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        # A file with a real source folder (not `File.generated`): mkdocs-jupyter wraps it and reads it there.
        files.append(
            File(
                f"{TUTORIALS}/{notebook.name}",
                src_dir=os.fspath(NOTEBOOKS.parent),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    files.append(File.generated(config, CLI_PAGE, content=cli_reference.page(width=HELP_WIDTH)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri.startswith("results/") and page.file.src_uri != "results/index.md":
        # The page as written (the macros have already replaced their calls in `markdown`).
        numbers = macros.hand_typed_numbers(Path(page.file.abs_src_path).read_text(encoding="utf-8"))
        if numbers:
            shown = "; ".join(numbers[:5])
            log.warning(f"{page.file.src_uri}: numbers written by hand, not generated from the data: {shown}")
    return markdown


def on_page_content(html: str, page, config, files) -> str:
    if page.file.src_uri.startswith(f"{TUTORIALS}/") and page.file.src_uri.endswith(".ipynb"):
        # The stored outputs call Plotly.newPlot; the script they need is served once by the site.
        root = macros.relative_root(page.url)
        return f'<script src="{root}{macros.ASSETS}/{macros.PLOTLY_JS}"></script>\n{notebook_links(page)}\n{html}'
    return html


def notebook_links(page) -> str:
    """A line above a tutorial: download its `.ipynb` (mkdocs-jupyter's `include_source` puts it beside
    the page) and the command that opens it in a checkout."""
    name = Path(page.file.src_uri).name
    return (
        f'<p class="notebook-links"><a href="{name}" download>Download {name}</a> &middot; in a checkout: '
        f"<code>jupyter lab experiments/notebooks/{name}</code></p>"
    )


def on_post_build(config) -> None:
    target = Path(config["site_dir"]) / macros.ASSETS / macros.PLOTLY_JS
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "figures" / macros.PLOTLY_JS, target)
