"""Update latency of the pathway explorer (`hl.explore`): a click on a head and a move of the slider.

For each model, the explorer opens on a prompt with a mask (the organism: a word of its `reverse` task
and the planted pathway; SmolLM2: the word "low" and its committed `antonym` mask) and its weight
order's removal sweep is precomputed (timed: `precompute`). Then, in this process (`measured =
kernel`: what the kernel spends from the new trait value to the new picture):
- `click`: a head not yet touched is removed or restored: a new set, one gated greedy pass;
- `slider`: the slider moves to a step not yet shown: read from the sweep (its logit lens decoded);
- `revisit`: a set shown before is shown again: from the cache.
With `--browser true`, the same in JupyterLab through Debian's Chromium (`docs/_hooks/lab.py`,
`measured = browser`): timed in the page from the click (or the slider's input and change events)
until the page shows the kernel's new picture. Medians over `--repeats` of each.

    python experiments/bench/explorer_latency.py --out figures/bench           # organism and SmolLM2, both ways

The load average of the machine at the start of each model's measurement is written beside it: on a
shared machine every time grows with it.
"""

from __future__ import annotations

import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

import headsup_lens as hl
from headsup_lens import organism
from headsup_lens.options import parse

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2_MASK = "figures/smollm2/masks/antonym.safetensors"
# What each model's explorer opens on: (prompt, mask, targets), as Python source for the notebook.
SETUPS = {
    "organism": (
        "word, answer = hl.load_task('organism/reverse').eval_pairs[0]\n"
        "mask = organism.planted_mask(organism.load_planted(), 'reverse', model)\n"
        "prompt, targets = word, [answer]"
    ),
    "smollm2": f"mask = hl.HeadMask.load({str(ROOT / SMOLLM2_MASK)!r}, model)\nprompt, targets = 'low', ['high']",
}


@dataclass
class Options:
    """Options of the explorer's latency measurement."""

    models: list[str] = field(default_factory=lambda: ["organism", "smollm2"])
    """Models to measure (of: organism, smollm2)."""
    repeats: int = 7
    """Clicks, slider moves and revisits timed per model and way."""
    max_new_tokens: int = 12
    """Tokens of the greedy continuation (the explorer's default)."""
    threads: int = 1
    """torch CPU threads (the kernel's too)."""
    browser: bool = True
    """Also measure in JupyterLab with Debian's Chromium through Playwright."""
    seed: int = 0
    """Seed of the heads clicked and the slider steps."""
    out: str | None = None
    """Folder for explorer_latency.csv (e.g. figures/bench)."""


def open_explorer(name: str, max_new_tokens: int):
    """The explorer of `SETUPS[name]` in this process, and the seconds its construction took."""
    namespace: dict = {"hl": hl, "organism": organism, "model": hl.load_model(name)}
    exec(SETUPS[name], namespace)
    started = time.perf_counter()
    explorer = hl.explore(
        namespace["model"],
        namespace["prompt"],
        namespace["mask"],
        targets=namespace["targets"],
        max_new_tokens=max_new_tokens,
        progress=False,
    )
    return explorer, time.perf_counter() - started


def plan(explorer, repeats: int, seed: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Heads to click (distinct, so every click makes a new set) and slider steps (distinct, not 0)."""
    rng = random.Random(seed)
    n_layers, n_heads = explorer.session.shape
    heads = rng.sample([(l, h) for l in range(n_layers) for h in range(n_heads)], repeats)
    steps = rng.sample(range(1, explorer.session.max_k + 1), repeats)
    return heads, steps


def toggled(removed: list, head: tuple[int, int]) -> list:
    return [h for h in removed if h != head] if head in removed else [*removed, head]


def kernel_times(explorer, heads, steps) -> dict[str, list[float]]:
    """Seconds of each update in this process (trait set to new picture, synchronously)."""
    times: dict[str, list[float]] = {"slider": [], "click": [], "revisit": []}
    visited = []
    for k in steps:
        started = time.perf_counter()
        explorer.k = k
        times["slider"].append(time.perf_counter() - started)
    for head in heads:
        new = toggled(explorer.removed, head)
        started = time.perf_counter()
        explorer.removed = new
        times["click"].append(time.perf_counter() - started)
        visited.append(list(explorer.removed))
    for removed in visited:
        explorer.removed = []  # away, then back to a set shown before
        started = time.perf_counter()
        explorer.removed = removed
        times["revisit"].append(time.perf_counter() - started)
    return times


IN_PAGE = """async ([kind, a, b]) => {
    const root = document.querySelector('.hl-explorer');
    const settled = new Promise((resolve) => {
        const observer = new MutationObserver(() => {
            if (root.dataset.busy === 'false') { observer.disconnect(); resolve(); }
        });
        observer.observe(root, { attributes: true, attributeFilter: ['data-busy'] });
    });
    const started = performance.now();
    if (kind === 'click') {
        root.querySelector(`td[data-layer="${a}"][data-head="${b}"]`).click();
    } else {
        const slider = root.querySelector('.hl-k');
        slider.value = String(a);
        slider.dispatchEvent(new Event('input', { bubbles: true }));
        slider.dispatchEvent(new Event('change', { bubbles: true }));
    }
    if (root.dataset.busy === 'false') return -1;  // nothing was sent
    await settled;
    return performance.now() - started;
}"""


def browser_times(name: str, options: Options, heads, steps) -> tuple[dict[str, list[float]], float]:
    """Seconds of each update seen in the page, and the seconds from running the cell to its first picture."""
    spec = importlib.util.spec_from_file_location("docs_hooks_lab", ROOT / "docs" / "_hooks" / "lab.py")
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    cell = (
        f"import torch\nimport headsup_lens as hl\nfrom headsup_lens import organism\ntorch.set_num_threads({options.threads})\n"
        f"model = hl.load_model({name!r})\n{SETUPS[name]}\n"
        f"explorer = hl.explore(model, prompt, mask, targets=targets, max_new_tokens={options.max_new_tokens}, "
        "progress=False)\nexplorer"
    )
    times: dict[str, list[float]] = {"slider": [], "click": [], "revisit": []}
    with tempfile.TemporaryDirectory() as folder:
        lab.write_notebook(Path(folder) / "latency.ipynb", [cell])
        with lab.jupyter_lab(Path(folder)) as (base, token), lab.chromium_page(Path(folder)) as page:
            started = time.perf_counter()
            lab.run_notebook(page, base, token, "latency.ipynb", timeout_s=600)
            lab.wait_for_explorer(page, timeout_s=900)
            first = time.perf_counter() - started
            for k in steps:
                times["slider"].append(page.evaluate(IN_PAGE, ["slider", k, 0]) / 1e3)
            for layer, head in heads:
                times["click"].append(page.evaluate(IN_PAGE, ["click", layer, head]) / 1e3)
            for layer, head in reversed(heads):  # undo the clicks: back through sets shown before
                times["revisit"].append(page.evaluate(IN_PAGE, ["click", layer, head]) / 1e3)
    return times, first


def rows(name: str, measured: str, times: dict[str, list[float]], extra: dict) -> list[dict]:
    return [
        {
            "model": name,
            "measured": measured,
            "action": action,
            "repeats": len(values),
            "median_ms": 1e3 * statistics.median(values),
            "min_ms": 1e3 * min(values),
            "max_ms": 1e3 * max(values),
            **extra,
        }
        for action, values in times.items()
    ]


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="explorer_latency.py", description=__doc__)
    unknown = sorted(set(options.models) - set(SETUPS))
    if unknown:
        raise SystemExit(f"--models: unknown {unknown} (known: {sorted(SETUPS)})")
    torch.set_num_threads(options.threads)
    os.environ["OMP_NUM_THREADS"] = str(options.threads)  # the kernel's, in the browser measurement
    records = []
    for name in options.models:
        load = os.getloadavg()[0]
        explorer, precompute = open_explorer(name, options.max_new_tokens)
        heads, steps = plan(explorer, options.repeats, options.seed)
        extra = {
            "n_heads_total": explorer.session.shape[0] * explorer.session.shape[1],
            "sweep_steps": explorer.session.max_k + 1,
            "max_new_tokens": options.max_new_tokens,
            "precompute_s": precompute,
            "threads": options.threads,
            "load_average": load,
        }
        records += rows(name, "kernel", kernel_times(explorer, heads, steps), extra)
        print(
            f"{name}: precompute {precompute:.1f} s; kernel "
            + ", ".join(f"{r['action']} {r['median_ms']:.0f} ms" for r in records if r["model"] == name)
        )
        del explorer
        if options.browser:
            times, first = browser_times(name, options, heads, steps)
            records += rows(name, "browser", times, {**extra, "first_picture_s": first})
            print(
                f"{name}: browser "
                + ", ".join(f"{r['action']} {r['median_ms']:.0f} ms" for r in records[-3:])
                + f"; cell run to first picture {first:.1f} s"
            )
    table = pd.DataFrame(records)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    if options.out:
        Path(options.out).mkdir(parents=True, exist_ok=True)
        path = Path(options.out) / "explorer_latency.csv"
        table.to_csv(path, index=False, float_format="%.4g")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
