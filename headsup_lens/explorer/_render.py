"""The explorer's HTML, rendered in Python: the heads grid with the logit lens beside each layer, and
the panes (continuation, tracked tokens, attention of the selected head).

The live widget inserts this HTML as it comes and only wires up clicks and the controls, so the
widget and its static snapshot (an exported notebook, the documentation site) show the same thing.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..masks import Head
from ._runner import PathwayView

CSS_FILE = Path(__file__).with_name("_widget.css")

# Colour scales as anchor colours, interpolated linearly in RGB.
_DIVERGING = ((178, 24, 43), (244, 165, 130), (247, 247, 247), (146, 197, 222), (33, 102, 172))  # RdBu
_SEQUENTIAL = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))  # viridis
_HEAT = ((255, 255, 255), (253, 208, 162), (253, 141, 60), (217, 72, 1), (127, 39, 4))  # oranges

COLOR_LEGENDS = {
    "mask": "mask logit M: red removes, blue keeps (σ(M) = 0.5 at white)",
    "mask values": "mask value: red removed, blue kept",
    "rank": "place in the removal order: dark = removed first",
    "attention": "share of the last token's attention on target tokens: dark = more",
}


def mix(anchors: Sequence[tuple[int, int, int]], t: float) -> str:
    """The colour at `t` in [0, 1] along evenly spaced anchor colours, as `rgb(r,g,b)`."""
    t = min(1.0, max(0.0, t)) * (len(anchors) - 1)
    i = min(int(t), len(anchors) - 2)
    f = t - i
    r, g, b = (round(a + f * (c - a)) for a, c in zip(anchors[i], anchors[i + 1]))
    return f"rgb({r},{g},{b})"


def cell_colours(kind: str, values: Tensor) -> list[list[str]]:
    """`[n_layers][n_heads]` CSS colours of a colour-by choice (`COLOR_LEGENDS`' keys)."""
    v = values.float()
    if kind == "mask":  # logits: symmetric around 0 (sigmoid 0.5), saturating at |M| = 4
        t = (torch.tanh(v / 4.0) + 1) / 2
        anchors = _DIVERGING
    elif kind == "mask values":
        t, anchors = v, _DIVERGING
    elif kind == "rank":  # rank 1 (removed first) darkest
        t = (v - 1) / max(1.0, float(v.max()) - 1)
        anchors = _SEQUENTIAL
    else:
        t = v / max(1e-9, float(v.max()))
        anchors = _HEAT
    return [[mix(anchors, float(x)) for x in row] for row in t]


@dataclass
class Frame:
    """Everything one rendering needs."""

    n_layers: int
    n_heads: int
    removed: Sequence[Head]
    selected: Head | None
    colours: list[list[str]]
    color_by: str
    hover: list[list[str]]
    planted: Mapping[str, Sequence[Head]]
    view: PathwayView
    full: PathwayView
    summary: str
    state: dict  # the traits this picture shows (the page compares them with what it asked for)
    prompt: str
    prompt_tokens: Sequence[str]
    target_positions: Sequence[int]
    attention: Tensor | None  # [n_layers, n_heads, pos], when a head is selected
    lens_shown: int = 3


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def token_span(text: str, classes: str = "hl-tok", title: str = "") -> str:
    shown = text.replace("\n", "⏎")
    title_attr = f' title="{esc(title)}"' if title else ""
    return f'<span class="{classes}"{title_attr}>{esc(shown)}</span>'


def planted_letters(planted: Mapping[str, Sequence[Head]]) -> dict[Head, list[str]]:
    """Each planted head's task names."""
    found: dict[Head, list[str]] = {}
    for task, heads in planted.items():
        for layer, head in heads:
            found.setdefault((int(layer), int(head)), []).append(task)
    return found


def grid_html(frame: Frame) -> str:
    """The heads grid (layer 0 at the bottom, as the package's head heat maps), each layer's row
    followed by that layer's logit-lens top tokens."""
    removed = set(frame.removed)
    planted = planted_letters(frame.planted)
    tops: dict[int, list[str]] = {}
    lens = frame.view.lens
    shown = lens["rank"] <= frame.lens_shown
    for layer, token, prob in zip(lens["layer"][shown], lens["token"][shown], lens["prob"][shown]):
        tops.setdefault(int(layer), []).append(token_span(token, "hl-tok hl-lens-tok", f"p = {prob:.3f}"))
    rows = []
    for layer in reversed(range(frame.n_layers)):
        cells = [f'<th class="hl-layer">L{layer}</th>']
        for head in range(frame.n_heads):
            classes = ["hl-head"]
            marks = []
            title = [f"layer {layer}, head {head}", frame.hover[layer][head]]
            if (layer, head) in removed:
                classes.append("hl-removed")
                marks.append('<span class="hl-x">×</span>')
                title.append("removed")
            if (layer, head) in planted:
                tasks = planted[(layer, head)]
                classes.append("hl-planted")
                marks.append(f'<span class="hl-p">{esc(tasks[0][:1])}</span>')
                title.append("planted: " + ", ".join(tasks))
            if frame.selected == (layer, head):
                classes.append("hl-selected")
            cells.append(
                f'<td class="{" ".join(classes)}" data-layer="{layer}" data-head="{head}" tabindex="0" '
                f'role="button" style="background:{frame.colours[layer][head]}" title="{esc(" · ".join(title))}">'
                f"{''.join(marks)}</td>"
            )
        cells.append(f'<td class="hl-lens">{" ".join(tops.get(layer, []))}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    footer = "".join(f'<th class="hl-headno">{h}</th>' for h in range(frame.n_heads))
    rows.append(f'<tr><th></th>{footer}<th class="hl-lens-title">logit lens: top tokens per layer</th></tr>')
    legend = [esc(COLOR_LEGENDS.get(frame.color_by, frame.color_by)), "× removed now"]
    if planted:
        tasks = sorted({t for names in planted.values() for t in names})
        legend.append("letter: planted S_t of a task (" + ", ".join(f"{t[:1]} = {esc(t)}" for t in tasks) + ")")
    legend.append("click a head to remove or restore it; shift-click to see its attention")
    return (
        f'<table class="hl-grid" aria-label="heads grid">{"".join(rows)}</table>'
        f'<div class="hl-legend">{" · ".join(legend)}</div>'
    )


def generation_html(frame: Frame) -> str:
    view, full = frame.view, frame.full
    spans = []
    for i, (token_id, text) in enumerate(zip(view.generation_ids, view.tokens)):
        differs = i >= len(full.generation_ids) or full.generation_ids[i] != token_id
        spans.append(
            token_span(
                text, "hl-tok hl-diff" if differs else "hl-tok", "differs from the full model" if differs else ""
            )
        )
    shorter = len(view.generation_ids) < len(full.generation_ids)
    ending = '<span class="hl-end">(stops: the full model goes on)</span>' if shorter else ""
    full_spans = "".join(token_span(t) for t in full.tokens)
    return (
        '<div class="hl-pane hl-generation-pane"><h4>Greedy continuation</h4>'
        f'<div class="hl-full">prompt: <span class="hl-prompt">{esc(frame.prompt)}</span></div>'
        f'<div class="hl-generation" data-generation="{esc(view.generation)}">{"".join(spans)}{ending}</div>'
        f'<div class="hl-full">full model: <span class="hl-full-text">{full_spans}</span></div>'
        '<div class="hl-note">tokens that differ from the full model are marked</div></div>'
    )


def tracked_html(frame: Frame) -> str:
    rows = []
    full_rank = dict(zip(frame.full.tracked.label, frame.full.tracked["rank"]))
    for row in frame.view.tracked.to_dict("records"):
        rank, before = int(row["rank"]), int(full_rank[row["label"]])
        moved = before - rank
        arrow = f"▲{moved}" if moved > 0 else (f"▼{-moved}" if moved < 0 else "")
        classes = ("hl-target" if row["kind"] == "target" else "") + (" hl-top1" if rank == 1 else "")
        rows.append(
            f'<tr class="{classes.strip()}"><td>{token_span(row["text"])}</td><td>{esc(row["kind"])}</td>'
            f'<td class="hl-num">{rank}</td><td class="hl-num">{row["logit"]:.2f}</td>'
            f'<td class="hl-num">{before}</td><td class="hl-move">{arrow}</td></tr>'
        )
    targets = (frame.view.tracked["kind"] == "target").any()
    note = '<div class="hl-note">a target given as text is tracked by its first token</div>' if targets else ""
    return (
        '<div class="hl-pane"><h4>Tracked tokens at the last prompt position</h4>'
        '<table class="hl-tracked"><tr><th>token</th><th>kind</th><th>rank</th><th>logit</th>'
        f"<th>full rank</th><th></th></tr>{''.join(rows)}</table>{note}</div>"
    )


def attention_html(frame: Frame) -> str:
    if frame.selected is None or frame.attention is None:
        return (
            '<div class="hl-pane hl-attention"><h4>Attention</h4>'
            '<div class="hl-note">shift-click a head (or choose "inspect") to see where the last prompt '
            "token looks from it</div></div>"
        )
    layer, head = frame.selected
    row = frame.attention[layer, head]
    top = float(row.max()) or 1.0
    targets = set(frame.target_positions)
    spans = []
    for position, (text, weight) in enumerate(zip(frame.prompt_tokens, row.tolist())):
        alpha = weight / top
        classes = "hl-tok hl-att" + (" hl-att-target" if position in targets else "")
        spans.append(
            f'<span class="{classes}" style="background:rgba(217,72,1,{alpha:.3f})" '
            f'title="position {position}: {weight:.3f}">{esc(text.replace(chr(10), "⏎"))}</span>'
        )
    share = ""
    if targets:
        on_target = float(row[sorted(targets)].sum())
        share = f'<div class="hl-note">on target tokens (outlined): <b class="hl-share">{on_target:.3f}</b></div>'
    return (
        f'<div class="hl-pane hl-attention"><h4>Attention of L{layer} H{head} from the last prompt token</h4>'
        f'<div class="hl-att-row">{"".join(spans)}</div>{share}</div>'
    )


def body_html(frame: Frame) -> str:
    """The grid and the panes (what the widget replaces on every update)."""
    return (
        f'<div class="hl-view" data-state="{esc(json.dumps(frame.state))}">'
        f'<div class="hl-summary">{esc(frame.summary)}</div>'
        '<div class="hl-main">'
        f'<div class="hl-left">{grid_html(frame)}</div>'
        f'<div class="hl-right">{generation_html(frame)}{tracked_html(frame)}{attention_html(frame)}</div>'
        "</div></div>"
    )


def snapshot_html(frame: Frame, controls: str) -> str:
    """A self-contained static picture of the explorer (its stylesheet inlined, no script)."""
    css = CSS_FILE.read_text(encoding="utf-8")
    return (
        f'<style>{css}</style><div class="hl-explorer hl-static">'
        f'<div class="hl-controls">{esc(controls)}</div>{body_html(frame)}</div>'
    )
