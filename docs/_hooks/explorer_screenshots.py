"""Screenshots of the pathway explorer in JupyterLab: `python3 docs/_hooks/explorer_screenshots.py`.

Starts JupyterLab on 127.0.0.1 with a scratch folder, opens a notebook per model in Debian's Chromium
through Playwright (`lab.py`), runs it, moves the explorer's slider and clicks heads as a user would,
and writes `docs/screenshots/explorer-<name>.png` (the explorer's notebook cell: its code and the widget):
- `organism`: the reverse task's word with the planted pathway as the mask; the slider removes the
  first 12 heads of its weight order (the planted S_t), a head is shift-clicked for its attention;
- `smollm2`: SmolLM2-135M-Instruct on the word "low" with the committed antonym mask; the slider
  removes every head the mask removes, a head is shift-clicked.
SmolLM2 must be in the model cache (`headsup fetch-model smollm2`); its sweep takes about a minute
on a CPU. `--only NAME` takes one of them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # a sibling module of this folder, which is not a package

ROOT = lab.ROOT
OUT = ROOT / "docs" / "screenshots"

# name -> (the notebook's first cell, the explorer's cell, slider step, head shift-clicked for its
# attention: a kept head that reads the prompt's word, chosen with analysis.last_position_attention)
SHOTS = {
    "organism": (
        """import headsup_lens as hl
from headsup_lens import organism

model = hl.load_model("organism")
word, answer = hl.load_task("organism/reverse").eval_pairs[0]
mask = organism.planted_mask(organism.load_planted(), "reverse", model)""",
        "hl.explore(model, word, mask, targets=[answer])",
        12,
        (6, 2),
    ),
    "smollm2": (
        """import warnings

import headsup_lens as hl

warnings.simplefilter("ignore", hl.masks.UnverifiedMaskWarning)  # the committed mask predates checksums
model = hl.load_model("smollm2")
mask = hl.HeadMask.load("figures/smollm2/masks/antonym.safetensors", model)""",
        'hl.explore(model, "low", mask, targets=["high"])',
        74,
        (26, 1),
    ),
}


def shoot(page, base: str, token: str, name: str, folder: Path) -> Path:
    setup, cell, k, head = SHOTS[name]
    lab.write_notebook(folder / f"{name}.ipynb", [setup, cell])
    lab.run_notebook(page, base, token, f"{name}.ipynb", timeout_s=900)
    page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
    lab.wait_for_explorer(page, timeout_s=900)
    shown = lab.move_slider(page, k)
    if shown != k:
        raise RuntimeError(f"{name}: the slider shows {shown}, not {k}")
    page.locator(f'.hl-explorer td[data-layer="{head[0]}"][data-head="{head[1]}"]').click(modifiers=["Shift"])
    lab.wait_idle(page)
    page.mouse.move(0, 0)  # no hover outline in the picture
    png = OUT / f"explorer-{name}.png"
    cell_box = page.locator(".jp-CodeCell", has=page.locator(".hl-explorer")).first
    cell_box.scroll_into_view_if_needed()
    cell_box.screenshot(path=str(png))
    state = lab.shown(page)
    sys.stdout.write(
        f"{png.relative_to(ROOT)}: k = {state['k']}, {len(state['removed'])} removed: {state['generation']!r}\n"
    )
    return png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SHOTS), help="only these screenshots")
    parser.add_argument("--chromium", default=lab.chromium_path(), help="the Chromium to drive (default: on the PATH)")
    args = parser.parse_args()
    if not args.chromium:
        parser.error("no chromium on the PATH (apt-get install chromium); or give --chromium PATH")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.only or SHOTS:
        with tempfile.TemporaryDirectory() as scratch:  # a server of its own: one explorer on the page
            folder = Path(scratch)
            (folder / "figures").symlink_to(
                ROOT / "figures"
            )  # the committed SmolLM2 mask, by its path in the repository
            with (
                lab.jupyter_lab(folder) as (base, token),
                lab.chromium_page(folder, width=1500, height=1400, chromium=args.chromium) as page,
            ):
                shoot(page, base, token, name, folder)


if __name__ == "__main__":
    main()
