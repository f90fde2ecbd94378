"""Update latency of the pathway explorer (`hl.explore`): a click on a head and a move of the slider.

For each model, the explorer opens on a prompt with a mask (the organism: a word of its `reverse` task
and the planted pathway; SmolLM2: the word "low" and its committed `antonym` mask) and precomputes
its weight order's removal sweep (timed: `precompute_s`). Then, `--repeats` times each:
- `slider`: the slider moves to a step not yet shown: read from the sweep (its logit lens decoded);
- `click`: from the mask's own set (the slider at the number of heads it removes), a head not yet
  touched is removed or restored: a new set, one gated greedy pass;
- `revisit`: those clicks again in reverse, back through sets shown before: from the cache;
- `click from the full model`: from the full model (the slider at 0), other heads: new sets whose
  continuations run longer, as the full model's does.
A gated pass takes about as long as its continuation has tokens: `new_tokens` is their mean length
for each kind of click (`--max-new-tokens` at most).
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


Move = tuple[str, int, int, str]  # (kind: "slider" or "click", k or layer, head, what it times or "")


def plan(shape: tuple[int, int], k_mask: int, repeats: int, seed: int) -> list[Move]:
    """The moves, each one update of the explorer: slider steps (distinct, never 0 or the mask's own
    k), an untimed move to the mask's own set, clicks on distinct heads (each a new set), the same
    clicks again in reverse (back through sets shown before: the cache), an untimed move to the full
    model, and clicks on other heads from there (sets the full model's long continuations follow)."""
    rng = random.Random(seed)
    n_layers, n_heads = shape
    heads = rng.sample([(l, h) for l in range(n_layers) for h in range(n_heads)], 2 * repeats)
    steps = rng.sample([k for k in range(1, n_layers * n_heads + 1) if k != k_mask], repeats)
    near, far = heads[:repeats], heads[repeats:]
    return [
        *[("slider", k, 0, "slider") for k in steps],
        ("slider", k_mask, 0, ""),
        *[("click", l, h, "click") for l, h in near],
        *[("click", l, h, "revisit") for l, h in reversed(near)],
        ("slider", 0, 0, ""),
        *[("click", l, h, "click from the full model") for l, h in far],
    ]


def toggled(removed: list, head: tuple[int, int]) -> list:
    return [h for h in removed if h != head] if head in removed else [*removed, head]


def by_action(seconds: list[float], moves: list[Move], kernel: bool) -> dict[str, list[float]]:
    """Updates (one per move) grouped by what each move times; the kernel's list starts with the
    explorer's first picture."""
    if len(seconds) != len(moves) + kernel:
        raise RuntimeError(f"{len(seconds)} updates for {len(moves)} moves: a move did not make exactly one")
    times: dict[str, list[float]] = {}
    for (_, _, _, timed), value in zip(moves, seconds[-len(moves) :]):
        if timed:
            times.setdefault(timed, []).append(value)
    return times


def new_tokens(explorer, moves: list[Move]) -> dict[str, float]:
    """Per kind of click, the mean length of the continuations of the sets the moves made (all in the
    explorer's cache by now: nothing runs)."""
    order = explorer.runner.order(explorer.order)
    removed: list = []
    lengths: dict[str, list[int]] = {}
    for kind, a, b, timed in moves:
        removed = list(order[:a]) if kind == "slider" else toggled(removed, (a, b))
        if timed.startswith("click"):
            view = explorer.runner.view(removed, explorer.alpha, explorer.gate)
            lengths.setdefault(timed, []).append(len(view.generation_ids))
    return {timed: statistics.mean(values) for timed, values in lengths.items()}


def kernel_times(explorer, moves: list[Move]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds of each update in this process (the explorer's own clock), and the continuations' lengths."""
    for kind, a, b, _ in moves:
        if kind == "slider":
            explorer.k = a
        else:
            explorer.removed = toggled(explorer.removed, (a, b))
    return by_action(explorer.update_seconds, moves, kernel=True), new_tokens(explorer, moves)


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
    if (root.dataset.busy === 'false') throw new Error('the move sent nothing');
    await settled;
    return performance.now() - started;
}"""


def browser_times(name: str, options: Options, moves: list[Move]) -> tuple[dict, dict, dict, float, float]:
    """Seconds of each update seen in the page and spent in the kernel, the continuations' lengths,
    the seconds the explorer took to open (its sweep), and the seconds from running the cell to its
    first picture."""
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
    report = (
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nfrom explorer_latency import new_tokens\n"
        f"print('REPORT', json.dumps({{'precompute': precompute, 'updates': explorer.update_seconds, "
        f"'new_tokens': new_tokens(explorer, {moves!r})}}))"
    )
    page_seconds = []
    with tempfile.TemporaryDirectory() as folder:
        lab.write_notebook(Path(folder) / "latency.ipynb", [cell, report])
        with lab.jupyter_lab(Path(folder)) as (base, token), lab.chromium_page(Path(folder)) as page:
            started = time.perf_counter()
            lab.run_notebook(page, base, token, "latency.ipynb", timeout_s=600, cells="first")
            lab.wait_for_explorer(page, timeout_s=900)
            first = time.perf_counter() - started
            for kind, a, b, _ in moves:
                page_seconds.append(page.evaluate(IN_PAGE, [kind, a, b]) / 1e3)
            lab.run_cell(page, 1)
            output = page.locator(".jp-OutputArea-output", has_text="REPORT")
            output.wait_for(timeout=60_000)
            report_data = json.loads(output.text_content().split("REPORT", 1)[1])
    kernel = by_action(report_data["updates"], moves, kernel=True)
    page_times = by_action(page_seconds, moves, kernel=False)
    return page_times, kernel, report_data["new_tokens"], report_data["precompute"], first


def rows(name: str, measured: str, times: dict[str, list[float]], tokens: dict[str, float], extra: dict) -> list[dict]:
    return [
        {
            "model": name,
            "measured": measured,
            "action": action,
            "repeats": len(values),
            "median_ms": 1e3 * statistics.median(values),
            "min_ms": 1e3 * min(values),
            "max_ms": 1e3 * max(values),
            "new_tokens": tokens.get(action, float("nan")),  # clicks: mean length of the continuations computed
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
        namespace: dict = {"hl": hl, "organism": organism, "model": model}
        exec(SETUPS[name], namespace)
        shape = (model.cfg.n_layers, model.cfg.n_heads)
        moves = plan(shape, len(namespace["mask"].removed_heads()), options.repeats, options.seed)
        extra = {
            "n_heads_total": shape[0] * shape[1],
            "sweep_steps": shape[0] * shape[1] + 1,
            "max_new_tokens": options.max_new_tokens,
            "threads": options.threads,
            "load_average": load,
        }
        if options.browser:
            del model, namespace  # the model runs in the notebook's kernel
            page_times, kernel, tokens, precompute, first = browser_times(name, options, moves)
            extra.update(precompute_s=precompute, first_picture_s=first)
            found = rows(name, "kernel", kernel, tokens, extra) + rows(name, "page", page_times, tokens, extra)
        else:
            explorer, precompute = open_explorer(model, name, options.max_new_tokens)
            kernel, tokens = kernel_times(explorer, moves)
            extra.update(precompute_s=precompute)
            found = rows(name, "kernel", kernel, tokens, extra)
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
