"""Screenshots of the built site in a real browser: `python3 docs/_hooks/screenshots.py`.

Builds the site (strict, offline) into a temporary folder, serves it on 127.0.0.1 and lets a
headless Chromium (`chromium` on the PATH, or `--chromium PATH`) load each page in `PAGES` with its
scripts (the plotly figures are drawn from the site's own plotly.js), then writes
`docs/screenshots/<name>.png`. Nothing is fetched from the internet.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots"
# name -> (path on the site, window height): the index, How it works, a guide page, a tutorial, the
# Performance page, results pages with their tables and plotly figures, and the API page of HeadMask.
PAGES = {
    "index": ("", 1000),
    "how-it-works": ("how-it-works/", 1400),
    "guide-analyses": ("guide/analyses/", 1000),
    "tutorial-explore-pathways": ("notebooks/explore_pathways/", 1200),
    "tutorial-smollm2": ("notebooks/smollm2_end_to_end/", 1400),
    "performance": ("performance/", 1400),
    "results-smollm2": ("results/smollm2/", 1400),
    "results-organism": ("results/organism/", 1500),
    "api-headmask": ("reference/api/masks/", 1100),
}
WIDTH = 1280


def build(site: Path) -> None:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)]
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def shoot(chromium: str, url: str, png: Path, height: int) -> None:
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={WIDTH},{height}",
        "--virtual-time-budget=8000",  # let the page's scripts (plotly) finish drawing
        f"--screenshot={png}",
        url,
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    if not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f"{chromium} wrote no screenshot of {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    parser.add_argument("--site", help="a site already built (mkdocs build --strict --site-dir SITE): skip the build")
    parser.add_argument("--pages", nargs="+", metavar="NAME", help=f"only these screenshots (of: {', '.join(PAGES)})")
    args = parser.parse_args()
    if not args.chromium:
        parser.error("no chromium on the PATH (apt-get install chromium); or give --chromium PATH")
    unknown = sorted(set(args.pages or ()) - set(PAGES))
    if unknown:
        parser.error(f"--pages: unknown {', '.join(unknown)} (known: {', '.join(PAGES)})")
    pages = {name: PAGES[name] for name in args.pages} if args.pages else PAGES
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        site = Path(args.site) if args.site else Path(folder) / "site"
        if not args.site:
            build(site)
        handler = functools.partial(_QuietHandler, directory=str(site))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}/"
            for name, (path, height) in pages.items():
                png = OUT / f"{name}.png"
                shoot(args.chromium, base + path, png, height)
                sys.stdout.write(f"{png.relative_to(ROOT)}: {png.stat().st_size // 1024} kB\n")
        finally:
            server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:
        pass


if __name__ == "__main__":
    main()
