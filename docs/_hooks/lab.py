"""Drive a notebook in a real JupyterLab (or Notebook 7) with the system's Chromium through Playwright.

Used by the explorer's browser test (`tests/explorer/test_browser.py`) and by the explorer's
screenshots (`docs/_hooks/explorer_screenshots.py`). JupyterLab runs on a free port of 127.0.0.1
with a token, its settings, workspaces and runtime files in a scratch folder, and the kernel sees
this checkout first (`PYTHONPATH`). Chromium is Debian's `chromium` (`apt-get install chromium`),
started by Playwright from its path with a fresh profile: Playwright's own browser download is not
used. Nothing is fetched from the internet.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# JupyterLab's own news and update checks would reach the internet and show a toast.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False}
}


def chromium_path() -> str | None:
    """The system's Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of code cells (no outputs) for the python3 kernel."""
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
            for source in cells
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return path


# The front ends: their server module, the option that exposes the app as window.jupyterapp, the URL
# of a notebook.
APPS = {
    "lab": ("jupyterlab", "LabApp", "lab/tree/{name}"),
    "notebook": ("notebook", "JupyterNotebookApp", "notebooks/{name}"),  # Notebook 7
}


@contextlib.contextmanager
def jupyter_lab(folder: Path, *, timeout_s: float = 180.0, app: str = "lab") -> Iterator[tuple[str, str]]:
    """Start JupyterLab (or Notebook 7: `app="notebook"`) serving `folder`; yields (base URL of a
    notebook, with `{name}` to fill in, and the token) and stops the server (and its kernels) on exit.
    Its log is `folder/lab.log`."""
    module, app_class, notebook_path = APPS[app]
    token = secrets.token_hex(16)
    port = free_port()
    state = folder / ".lab-state"
    for name, settings in LAB_SETTINGS.items():
        target = state / "settings" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(settings), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(state / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    command = [
        sys.executable,
        "-m",
        module,
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={folder}",
        f"--{app_class}.expose_app_in_browser=True",  # window.jupyterapp: run the cells through the app's own command
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # containers and CI runners often run as root
    base = f"http://127.0.0.1:{port}"
    with (folder / "lab.log").open("w") as log:
        server = subprocess.Popen(
            command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"JupyterLab exited ({server.returncode}); see {folder / 'lab.log'}")
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not answer within {timeout_s:.0f} s; see {folder / 'lab.log'}")
                time.sleep(0.5)
            yield f"{base}/{notebook_path}", token
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)  # the server's own group: it and the kernels it started
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
                server.wait()


@contextlib.contextmanager
def chromium_page(folder: Path, *, width: int = 1400, height: int = 1000, chromium: str | None = None) -> Iterator[Any]:
    """A Playwright page in the system's Chromium with a fresh profile under `folder`."""
    from playwright.sync_api import sync_playwright

    executable = chromium or chromium_path()
    if executable is None:
        raise RuntimeError("no chromium on the PATH (apt-get install chromium)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(folder / "chromium-profile"),
            executable_path=executable,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": width, "height": height},
            device_scale_factor=1,
        )
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def run_notebook(page: Any, base: str, token: str, name: str, *, timeout_s: float = 300.0, cells: str = "all") -> None:
    """Open `name` (`base` as `jupyter_lab` yields it), wait for its kernel and run every cell (the
    app's `notebook:run-all-cells`), or with `cells="first"` the first one only (`run_cell` runs
    another later)."""
    page.goto(f"{base.format(name=name)}?token={token}")
    ready = """() => {
        const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        const kernel = widget && widget.sessionContext && widget.sessionContext.session
            && widget.sessionContext.session.kernel;
        return kernel && kernel.status === "idle";
    }"""
    page.wait_for_function(ready, timeout=timeout_s * 1000)
    if cells == "all":
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    else:
        run_cell(page, 0)


def run_cell(page: Any, index: int) -> None:
    """Run the cell at `index` of the notebook in view."""
    page.evaluate(
        """(index) => {
        window.jupyterapp.shell.currentWidget.content.activeCellIndex = index;
        return window.jupyterapp.commands.execute('notebook:run-cell');
    }""",
        index,
    )


def wait_for_explorer(page: Any, *, timeout_s: float = 300.0) -> Any:
    """The explorer's root element once it has drawn its first view and the model is idle."""
    page.wait_for_selector(".hl-explorer .hl-generation", timeout=timeout_s * 1000)
    wait_idle(page, timeout_s=timeout_s)
    return page.locator(".hl-explorer").first


def wait_idle(page: Any, *, timeout_s: float = 120.0) -> None:
    """Until the explorer shows no running model (set by the page at a click, cleared by the kernel)."""
    page.wait_for_function(
        "() => document.querySelector('.hl-explorer').dataset.busy === 'false'", timeout=timeout_s * 1000
    )


def move_slider(page: Any, k: int) -> int:
    """Drag the "remove the first k heads" slider to about `k`, then step to `k` with the arrow
    keys; returns the value it shows."""
    slider = page.locator(".hl-explorer .hl-k").first
    box = slider.bounding_box()
    top = int(slider.get_attribute("max"))
    thumb = 16  # Chromium's range thumb, about; the keys correct the rest
    x = box["x"] + thumb / 2 + (box["width"] - thumb) * k / top
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + thumb / 2, y)
    page.mouse.down()
    page.mouse.move(x, y, steps=8)
    page.mouse.up()
    wait_idle(page)
    for _ in range(20):
        value = int(slider.input_value())
        if value == k:
            break
        slider.press("ArrowRight" if value < k else "ArrowLeft")
        wait_idle(page)
    return int(page.locator(".hl-explorer .hl-k-value").first.text_content())


def shown(page: Any) -> dict[str, Any]:
    """What the explorer shows now: the removed heads of the grid, the continuation (its attribute and
    its tokens' text) and the summary line."""
    return page.evaluate(
        """() => {
        const root = document.querySelector('.hl-explorer');
        const generation = root.querySelector('.hl-generation');
        return {
            removed: [...root.querySelectorAll('td.hl-removed[data-head]')]
                .map(cell => [Number(cell.dataset.layer), Number(cell.dataset.head)]),
            generation: generation.dataset.generation,
            tokens: [...generation.querySelectorAll('.hl-tok')].map(t => t.textContent).join(''),
            summary: root.querySelector('.hl-summary').textContent,
            k: Number(root.querySelector('.hl-k-value').textContent),
        };
    }"""
    )
