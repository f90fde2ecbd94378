"""Update latency of the pathway explorer (`hl.explore`): a click on a head and a move of the slider.

For each model, the explorer opens on a prompt with a mask (the organism: a word of its `reverse` task
and the planted pathway; SmolLM2: the word "low" and its committed `antonym` mask) and precomputes
its weight order's removal sweep (timed: `precompute_s`). Then, each `--repeats` times:
- `slider`: the slider moves to a step not yet shown: read from the sweep (its logit lens decoded);
- `click`: a head not yet touched is removed or restored: a new set, one gated greedy pass;
- `revisit`: a set shown before is shown again (the clicks undone in turn): from the cache.
By default this happens in JupyterLab, through Debian's Chromium (`docs/_hooks/lab.py`): `measured =
page` is timed in the page, from the click (or the slider's input and change events) until the page
shows the kernel's new picture; `measured = kernel` is what the kernel spent on each of those same
updates, from the new value to the new picture (`Explorer.update_seconds`). With `--browser false`
the explorer runs in this process and only `kernel` is measured. Medians over the repeats.

    python experiments/bench/explorer_latency.py --out figures/bench           # organism and SmolLM2, in the page

The load average of the machine at the start of each model's measurement is written beside it: on a
shared machine every time grows with it.
"""

from __future__ import annotations

import importlib.util
import json
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


def open_explorer(model, name: str, max_new_tokens: int):
    """The explorer of `SETUPS[name]` in this process, and the seconds its construction took."""
    namespace: dict = {"hl": hl, "organism": organism, "model": model}
    exec(SETUPS[name], namespace)
    started = time.perf_counter()
    explorer = hl.explore(
        model,
        namespace["prompt"],
        namespace["mask"],
        targets=namespace["targets"],
        max_new_tokens=max_new_tokens,
        progress=False,
    )
    return explorer, time.perf_counter() - started


def plan(shape: tuple[int, int], repeats: int, seed: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Heads to click (distinct, so every click makes a new set) and slider steps (distinct, not 0;
    the sweep covers every head)."""
    rng = random.Random(seed)
    n_layers, n_heads = shape
    heads = rng.sample([(l, h) for l in range(n_layers) for h in range(n_heads)], repeats)
    steps = rng.sample(range(1, n_layers * n_heads + 1), repeats)
    return heads, steps


def toggled(removed: list, head: tuple[int, int]) -> list:
    return [h for h in removed if h != head] if head in removed else [*removed, head]


def kernel_times(explorer, heads, steps) -> dict[str, list[float]]:
    """Seconds of each update in this process (the explorer's own clock of each update)."""
    for k in steps:
        explorer.k = k
    for head in [*heads, *reversed(heads)]:  # the clicks, then the same clicks again: back through shown sets
        explorer.removed = toggled(explorer.removed, head)
    return split(explorer.update_seconds, len(steps), len(heads))


def split(seconds: list[float], n_steps: int, n_heads: int) -> dict[str, list[float]]:
    """The last updates of a run of `n_steps` slider moves, `n_heads` clicks and their undoing, by action."""
    last = seconds[-(n_steps + 2 * n_heads) :]
    return {"slider": last[:n_steps], "click": last[n_steps : n_steps + n_heads], "revisit": last[n_steps + n_heads :]}


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


def browser_times(name: str, options: Options, heads, steps) -> tuple[dict, dict, float, float]:
    """Seconds of each update seen in the page and spent in the kernel, the seconds the explorer took
    to open (its sweep), and the seconds from running the cell to its first picture."""
    spec = importlib.util.spec_from_file_location("docs_hooks_lab", ROOT / "docs" / "_hooks" / "lab.py")
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    cell = (
        "import json, time\nimport torch\nimport headsup_lens as hl\nfrom headsup_lens import organism\n"
        f"torch.set_num_threads({options.threads})\nmodel = hl.load_model({name!r})\n{SETUPS[name]}\n"
        "started = time.perf_counter()\n"
        f"explorer = hl.explore(model, prompt, mask, targets=targets, max_new_tokens={options.max_new_tokens}, "
        "progress=False)\nprecompute = time.perf_counter() - started\nexplorer"
    )
    report = "print('REPORT', json.dumps({'precompute': precompute, 'updates': explorer.update_seconds}))"
    page_times: dict[str, list[float]] = {"slider": [], "click": [], "revisit": []}
    with tempfile.TemporaryDirectory() as folder:
        lab.write_notebook(Path(folder) / "latency.ipynb", [cell, report])
        with lab.jupyter_lab(Path(folder)) as (base, token), lab.chromium_page(Path(folder)) as page:
            started = time.perf_counter()
            lab.run_notebook(page, base, token, "latency.ipynb", timeout_s=600)
            lab.wait_for_explorer(page, timeout_s=900)
            first = time.perf_counter() - started
            for k in steps:
                page_times["slider"].append(page.evaluate(IN_PAGE, ["slider", k, 0]) / 1e3)
            for layer, head in heads:
                page_times["click"].append(page.evaluate(IN_PAGE, ["click", layer, head]) / 1e3)
            for layer, head in reversed(heads):  # undo the clicks: back through sets shown before
                page_times["revisit"].append(page.evaluate(IN_PAGE, ["click", layer, head]) / 1e3)
            page.evaluate(
                "() => { const notebook = window.jupyterapp.shell.currentWidget; notebook.content.activeCellIndex = 1;"
                " return window.jupyterapp.commands.execute('notebook:run-cell'); }"
            )
            output = page.locator(".jp-OutputArea-output", has_text="REPORT")
            output.wait_for(timeout=60_000)
            report_data = json.loads(output.text_content().split("REPORT", 1)[1])
    kernel = split(report_data["updates"], len(steps), len(heads))
    return page_times, kernel, report_data["precompute"], first


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
        model = hl.load_model(name)
        shape = (model.cfg.n_layers, model.cfg.n_heads)
        heads, steps = plan(shape, options.repeats, options.seed)
        extra = {
            "n_heads_total": shape[0] * shape[1],
            "sweep_steps": shape[0] * shape[1] + 1,
            "max_new_tokens": options.max_new_tokens,
            "threads": options.threads,
            "load_average": load,
        }
        if options.browser:
            del model  # the model runs in the notebook's kernel
            page_times, kernel, precompute, first = browser_times(name, options, heads, steps)
            extra.update(precompute_s=precompute, first_picture_s=first)
            found = rows(name, "kernel", kernel, extra) + rows(name, "page", page_times, extra)
        else:
            explorer, precompute = open_explorer(model, name, options.max_new_tokens)
            extra.update(precompute_s=precompute)
            found = rows(name, "kernel", kernel_times(explorer, heads, steps), extra)
        records += found
        sys.stdout.write(
            f"{name}: opened in {precompute:.1f} s; "
            + ", ".join(f"{r['measured']} {r['action']} {r['median_ms']:.0f} ms" for r in found)
            + "\n"
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
