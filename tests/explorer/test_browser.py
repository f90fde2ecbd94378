"""The explorer in a real browser: JupyterLab and Notebook 7 on a free local port, a notebook that opens
the explorer on the organism, Debian's Chromium driven by Playwright (`docs/_hooks/lab.py`). The test
runs the cell, moves the slider and clicks heads as a user would, and checks that the continuation the
page shows is what `removal_sweep` and `value_gate` give for the same set, computed here in the test's
own process.

It starts a server, a kernel and a browser (under a minute for each front end on a 2-core machine): it
is in the slow suite (`pytest -m slow`). The same equalities are checked without a browser in
`test_explorer.py`."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

import headsup_lens as hl
from headsup_lens import HeadMask, organism, removal_sweep, value_gate

from .test_explorer import MAX_NEW, greedy_reference

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("chromium") or shutil.which("chromium-browser")),
        reason="no chromium (apt-get install chromium)",
    ),
]


def lab_driver():
    spec = importlib.util.spec_from_file_location("docs_hooks_lab", ROOT / "docs" / "_hooks" / "lab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOTEBOOK = f"""import headsup_lens as hl
from headsup_lens import organism

model = hl.load_model("organism")
word, answer = hl.load_task("organism/reverse").eval_pairs[0]
mask = organism.planted_mask(organism.load_planted(), "reverse", model)
explorer = hl.explore(model, word, mask, targets=[answer], max_new_tokens={MAX_NEW}, progress=False)
explorer"""


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_the_page_shows_what_the_sweep_and_the_gate_give(tmp_path, app):
    pytest.importorskip("playwright")
    pytest.importorskip("anywidget")
    pytest.importorskip("jupyterlab" if app == "lab" else "notebook")
    lab = lab_driver()
    model = hl.load_model("organism", device="cpu")
    word, answer = hl.load_task("organism/reverse").eval_pairs[0]
    mask = organism.planted_mask(organism.load_planted(), "reverse", model)
    order = mask.removal_order()
    sweep = removal_sweep(model, word, mask, target_tokens=[answer], max_new_tokens=MAX_NEW, progress=False)

    def expected(removed):
        ids, _ = greedy_reference(model, word, value_gate(model, HeadMask.from_heads(removed, model)))
        return model.tokenizer.decode(ids)

    lab.write_notebook(tmp_path / "explore.ipynb", [NOTEBOOK])
    with lab.jupyter_lab(tmp_path, app=app) as (base, token), lab.chromium_page(tmp_path) as page:
        lab.run_notebook(page, base, token, "explore.ipynb")
        lab.wait_for_explorer(page)
        first = lab.shown(page)
        assert first["removed"] == [] and first["generation"] == sweep.generations[0]

        # The slider: remove the first 12 heads of the weight order (the planted pathway).
        k = lab.move_slider(page, 12)
        now = lab.shown(page)
        assert k == now["k"] == 12
        assert sorted(map(tuple, now["removed"])) == sorted(order[:12])
        assert now["generation"] == now["tokens"] == sweep.generations[12] != sweep.generations[0]
        assert "read from the precomputed sweep" in now["summary"]

        # A click on a head outside the set removes it; a click on a removed head restores it.
        for head in [(3, 4), order[0]]:
            page.locator(f'.hl-explorer td[data-layer="{head[0]}"][data-head="{head[1]}"]').click()
            lab.wait_idle(page)
            now = lab.shown(page)
            removed = sorted(map(tuple, now["removed"]))
            assert now["generation"] == now["tokens"] == expected(removed), removed
        assert (3, 4) in removed and order[0] not in removed
        assert "one gated greedy pass" in now["summary"]

        # Shift-click: the attention of that head.
        page.locator('.hl-explorer td[data-layer="2"][data-head="5"]').click(modifiers=["Shift"])
        lab.wait_idle(page)
        assert page.locator(".hl-explorer .hl-attention h4").text_content() == (
            "Attention of L2 H5 from the last prompt token"
        )
        assert sorted(map(tuple, lab.shown(page)["removed"])) == removed  # inspecting removes nothing
