"""`explore`: a Jupyter widget over a prompt, to remove heads by hand or along an order and watch the
continuation, the tracked tokens, the logit lens and a head's attention change.

The widget is an anywidget (JupyterLab, Notebook 7, VS Code, Colab): a small script draws the
controls and sends clicks; all model work and all rendering happen here, in Python
(`_runner.ExplorerRunner`, `_render`). Outside a live kernel (an exported notebook, the
documentation site) the cell shows a static HTML snapshot of the same view.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformer_lens.model_bridge import TransformerBridge

from .._names import Gate
from .._validate import check_float, check_int
from ..analysis._common import check_heads
from ..gates import GATES, GateKind, check_gate, gate_kind
from ..masks import Head, HeadMask
from ..models import fingerprint
from ..organism import load_planted
from ._render import Frame, body_html, cell_colours, snapshot_html
from ._runner import ExplorerRunner, PathwayView

try:  # the `explore` extra: pip install "headsup_lens[explore]"
    import anywidget
    import traitlets
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'the explorer needs anywidget: pip install "headsup_lens[explore]" (or pip install anywidget)'
    ) from error

HERE = Path(__file__).parent
ORDER_NAMES = {
    "weight": "weight order",
    "given": "given order",
    "influence": "influence order",
    "random": "random order",
}


@dataclass(frozen=True)
class ExplorerState:
    """What an explorer shows, as plain values: save it, set it back (`Explorer.state = ...`).

    `removed` are the removed heads, `alpha` / `gate` how they are gated, `order` / `k` the slider
    (the set is `order`'s first `k` heads unless heads were clicked since), `selected` the head whose
    attention is shown (None: none)."""

    removed: tuple[Head, ...]
    alpha: float
    gate: str
    order: str
    k: int
    selected: Head | None = None


def _heads(value: Any) -> list[Head]:
    """Heads as `(layer, head)` tuples (the page sends lists); the values were checked on the way in."""
    return [(layer, head) for layer, head in value]


class Explorer(anywidget.AnyWidget):
    """The pathway explorer (see `explore`). Traits shared with the page:

    - `removed`: the removed heads, a list of `(layer, head)`; settable from code;
    - `k` and `order`: the slider, "remove the first k heads" of an order (`config["orders"]`);
    - `alpha` (a gate that scales heads only: the value gate) and `gate` (a key of `gates.GATES` that
      can act on the model: `"value"`, `"query"`, or a kind registered since);
    - `selected`: `(layer, head)` whose attention is shown, or `[]`;
    - `color_by`: what colours the grid (`config["color_by"]`);
    - read-only: `generation` (the greedy continuation of the current set), `busy` (the model is
      running), `status`, `config`, `html` (the rendered grid and panes).
    """

    _esm = HERE / "_widget.js"
    _css = HERE / "_widget.css"

    removed = traitlets.List().tag(sync=True)
    k = traitlets.Int(0).tag(sync=True)
    order = traitlets.Unicode("").tag(sync=True)
    alpha = traitlets.Float(0.0).tag(sync=True)
    gate = traitlets.Unicode("value").tag(sync=True)
    selected = traitlets.List().tag(sync=True)
    color_by = traitlets.Unicode("").tag(sync=True)
    generation = traitlets.Unicode("", read_only=True).tag(sync=True)
    busy = traitlets.Bool(False, read_only=True).tag(sync=True)
    status = traitlets.Unicode("", read_only=True).tag(sync=True)
    config = traitlets.Dict(read_only=True).tag(sync=True)
    html = traitlets.Unicode("", read_only=True).tag(sync=True)

    def __init__(
        self,
        runner: ExplorerRunner,
        *,
        planted: Mapping[str, Sequence[Head]],
        alpha: float,
        gate: str,
        order: str,
        k: int,
        removed: Sequence[Head] | None,
        selected: Head | None,
        color_by: str,
        progress: bool,
    ) -> None:
        super().__init__()
        self._runner = runner
        self._planted = {
            task: check_heads(runner.model, list(heads), f"planted[{task!r}]") for task, heads in planted.items()
        }
        self._gates: dict[str, type[GateKind]] = {}
        for name, kind in GATES.items():
            with contextlib.suppress(ValueError):  # a gate that cannot act on this architecture
                kind.check_model(runner.model)
                self._gates[name] = kind
        self._color_options = (["mask"] if runner.mask is not None else []) + ["rank"]
        if runner.target_positions():
            self._color_options.append("attention")
        self._ready = False
        self._update_seconds: collections.deque[float] = collections.deque(maxlen=1000)
        self._update_config()
        with self._status(f"precomputing the {ORDER_NAMES[order]} sweep ({runner.max_k + 1} sets)"):
            runner.sweep(order, alpha, gate, progress=progress)  # type: ignore[arg-type]
        self.order = order
        self.alpha = alpha
        self.gate = gate
        self.k = k
        self.color_by = color_by or self._color_options[0]
        self.removed = list(removed) if removed is not None else runner.order(order)[:k]
        self.selected = list(selected) if selected is not None else []
        self._ready = True
        self.on_msg(self._on_message)
        self._refresh()

    # ----------------------------------------------------------------- validation of what the page or code sets
    @traitlets.validate("removed")
    def _valid_removed(self, proposal) -> list[Head]:
        heads = check_heads(self._runner.model, list(proposal["value"]), "removed")
        return list(dict.fromkeys(heads))  # a head clicked twice in one message counts once

    @traitlets.validate("selected")
    def _valid_selected(self, proposal) -> list[int]:
        value = list(proposal["value"])
        if not value:
            return []
        if len(value) != 2:
            raise ValueError(f"selected must be one (layer, head) pair or [], got {value!r}")
        (head,) = check_heads(self._runner.model, [tuple(value)], "selected")
        return list(head)

    @traitlets.validate("alpha")
    def _valid_alpha(self, proposal) -> float:
        alpha = check_float("alpha", proposal["value"], 0.0, 1.0)
        if alpha != 0.0 and not gate_kind(self.gate).alpha:
            raise traitlets.TraitError(f"the {self.gate} gate takes alpha=0; choose a gate that scales heads")
        return alpha

    @traitlets.validate("gate")
    def _valid_gate(self, proposal) -> str:
        gate = proposal["value"]
        if gate not in self._gates:
            raise traitlets.TraitError(f"gate must be one of {list(self._gates)} on this model, got {gate!r}")
        if not self._gates[gate].alpha and self.alpha != 0.0:
            raise traitlets.TraitError(f"the {gate} gate takes alpha=0; set alpha=0 first")
        return gate

    @traitlets.validate("order")
    def _valid_order(self, proposal) -> str:
        if proposal["value"] not in self._runner.orders:
            raise traitlets.TraitError(f"order must be one of {list(self._runner.orders)}, got {proposal['value']!r}")
        return proposal["value"]

    @traitlets.validate("k")
    def _valid_k(self, proposal) -> int:
        return check_int("k", proposal["value"], minimum=0, maximum=self._runner.max_k)

    @traitlets.validate("color_by")
    def _valid_color_by(self, proposal) -> str:
        if proposal["value"] not in self._color_options:
            raise traitlets.TraitError(f"color_by must be one of {self._color_options}, got {proposal['value']!r}")
        return proposal["value"]

    # ----------------------------------------------------------------- reactions
    @traitlets.observe("k", "order")
    def _on_slider(self, change) -> None:
        if not self._ready:
            return
        if change["name"] == "order":
            self.precompute()
        heads = self._runner.order(self.order)[: self.k]
        if set(heads) != set(self.removed):
            self.removed = heads  # refreshes through `_on_change`
        else:
            self._refresh()

    @traitlets.observe("removed", "alpha", "gate", "selected", "color_by")
    def _on_change(self, change) -> None:
        if self._ready:
            self._refresh()

    def _on_message(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("do") == "precompute":
            self.precompute()
            self._refresh()

    # ----------------------------------------------------------------- public methods
    def precompute(self) -> None:
        """Compute the current order's removal sweep under the current gate setting, so that the
        slider scrubs it without running the model (done once per order and setting)."""
        runner = self._runner
        if not runner.has_sweep(self.order, self.alpha, self.gate):
            with self._status(f"precomputing the {ORDER_NAMES[self.order]} sweep ({runner.max_k + 1} sets)"):
                runner.sweep(self.order, self.alpha, self.gate)  # type: ignore[arg-type]
            self._update_config()

    def to_mask(self) -> HeadMask:
        """The current set as a `HeadMask` (the removed heads 0, the others 1); the prompt and the
        gate setting go to its metadata."""
        mask = HeadMask.from_heads(list(self.removed), self._runner.model)
        metadata = {"explorer_prompt": self._runner.prompt, "gate": self.gate, "alpha": self.alpha}
        return dataclasses.replace(mask, metadata=metadata)

    @property
    def state(self) -> ExplorerState:
        """The current state (see `ExplorerState`); assign one to restore it."""
        return ExplorerState(
            removed=tuple(self.removed),
            alpha=self.alpha,
            gate=self.gate,
            order=self.order,
            k=self.k,
            selected=tuple(self.selected) if self.selected else None,  # type: ignore[arg-type]
        )

    @state.setter
    def state(self, state: ExplorerState) -> None:
        if not isinstance(state, ExplorerState):
            raise TypeError(f"state must be an ExplorerState, got {type(state).__name__}")
        before = self.state
        new_order = state.order != self.order
        self._ready = False
        try:
            self._apply(state)
        except BaseException:
            self._apply(before)  # all or nothing: the state it had was valid, so it goes back whole
            raise
        finally:
            self._ready = True
        if new_order:  # as when the order is chosen on the page
            self.precompute()
        self._refresh()

    def _apply(self, state: ExplorerState) -> None:
        """Set every trait of `state` in an order each check accepts (the caller refreshes once)."""
        self.alpha = 0.0  # the gate's check sees alpha 0 on the way
        self.gate = state.gate
        self.alpha = state.alpha
        self.order = state.order
        self.k = state.k
        self.removed = list(state.removed)
        self.selected = list(state.selected) if state.selected is not None else []

    @property
    def view(self) -> PathwayView:
        """What the model does with the current set (the continuation, tracked tokens, logit lens)."""
        return self._runner.view(_heads(self.removed), self.alpha, self.gate)  # type: ignore[arg-type]

    @property
    def runner(self) -> ExplorerRunner:
        """The model work behind the widget: orders, sweeps, caches."""
        return self._runner

    @property
    def update_seconds(self) -> list[float]:
        """Seconds each of the last updates took in the kernel (computing and rendering the new
        view, up to 1000 of them, oldest first)."""
        return list(self._update_seconds)

    # ----------------------------------------------------------------- rendering
    @contextlib.contextmanager
    def _status(self, message: str) -> Iterator[None]:
        self._announce(message)
        try:
            yield
        finally:
            self._settle()

    def _announce(self, message: str) -> None:
        """Tell the page that the model runs (one message, sent before the work starts)."""
        with self.hold_sync():
            self.set_trait("status", message)
            self.set_trait("busy", True)

    def _settle(self, **traits: Any) -> None:
        """Send the results and the end of the work in one message (each message is a hop through
        the kernel's socket and the server to the page)."""
        with self.hold_sync():
            for name, value in traits.items():
                self.set_trait(name, value)
            self.set_trait("busy", False)
            self.set_trait("status", "")

    def _update_config(self) -> None:
        runner = self._runner
        self.set_trait(
            "config",
            {
                "n_layers": runner.shape[0],
                "n_heads": runner.shape[1],
                "max_k": runner.max_k,
                "orders": [[name, ORDER_NAMES[name]] for name in runner.orders],
                # [name, label, whether alpha applies] of every gate this model serves: the page's menu
                "gates": [[name, kind.label, kind.alpha] for name, kind in self._gates.items()],
                "color_by": [[option, self._color_label(option)] for option in self._color_options],
                "swept": [
                    [name, alpha, gate] for (name, alpha, gate) in runner.sweeps
                ],  # which (order, alpha, gate) the slider scrubs without running the model
            },
        )

    def _color_label(self, option: str) -> str:
        mask = self._runner.mask
        if option == "mask":
            return "mask logits" if mask is not None and mask.logits is not None else "mask values"
        return {"rank": "order rank", "attention": "attention on target"}[option]

    def _frame(self) -> Frame:
        runner = self._runner
        removed = _heads(self.removed)
        gate: Gate = self.gate  # type: ignore[assignment]
        view = runner.view(removed, self.alpha, gate)
        selected = tuple(self.selected) if self.selected else None
        attention = None
        if selected is not None or self.color_by == "attention":
            attention = runner.attention(removed, self.alpha, gate)
        n_layers, n_heads = runner.shape
        order = runner.order(self.order)
        rank = torch.full((n_layers, n_heads), float(len(order) + 1))
        for i, (layer, head) in enumerate(order):
            rank[layer, head] = i + 1
        mask = runner.mask
        if self.color_by == "mask" and mask is not None:
            kind, values = ("mask", mask.logits) if mask.logits is not None else ("mask values", mask.values)
        elif self.color_by == "attention" and attention is not None:
            kind, values = "attention", attention[..., runner.target_positions()].sum(-1)
        else:
            kind, values = "rank", rank
        hover = [
            [
                " · ".join(
                    [f"{ORDER_NAMES[self.order]} #{int(rank[layer, head])}"]
                    + (
                        [f"logit {float(mask.logits[layer, head]):.2f}"]
                        if mask is not None and mask.logits is not None
                        else []
                    )
                )
                for head in range(n_heads)
            ]
            for layer in range(n_layers)
        ]
        return Frame(
            n_layers=n_layers,
            n_heads=n_heads,
            removed=removed,
            selected=selected,  # type: ignore[arg-type]
            colours=cell_colours(kind, values),
            color_by=kind,
            hover=hover,
            planted=self._planted,
            view=view,
            full=runner.full_view(),
            summary=self._summary(view),
            state={
                "removed": [list(h) for h in sorted(removed)],
                "k": self.k,
                "order": self.order,
                "alpha": self.alpha,
                "gate": self.gate,
                "selected": list(self.selected),
                "color_by": self.color_by,
            },
            prompt=runner.prompt,
            prompt_tokens=runner.prompt_tokens,
            target_positions=runner.target_positions(),
            attention=attention,
        )

    def _summary(self, view: PathwayView) -> str:
        n = len(view.removed)
        order = self._runner.order(self.order)
        if set(order[: self.k]) == view.removed:
            where = f"the first {n} of the {ORDER_NAMES[self.order]}"
        else:
            where = "a set of your own"
        gate = self._gate_text()
        source = "read from the precomputed sweep" if view.source == "sweep" else "one gated greedy pass"
        return f"{n} heads removed ({where}) · {gate} · {source}"

    def _gate_text(self) -> str:
        return f"{self.gate} gate" + (f", α = {self.alpha:g}" if self._gates[self.gate].alpha else "")

    def _refresh(self) -> None:
        started = time.perf_counter()
        self._announce("running the model")
        try:
            frame = self._frame()
            html = body_html(frame)
        except BaseException:
            self._settle()
            raise
        self._settle(html=html, generation=frame.view.generation)
        self._update_seconds.append(time.perf_counter() - started)

    def snapshot(self) -> str:
        """The current view as self-contained HTML (no script): what an exported notebook shows."""
        gate = self._gate_text()
        controls = (
            f"{ORDER_NAMES[self.order]}: remove the first k heads, k = {self.k} of {self._runner.max_k} · "
            f"{gate} · (a static snapshot: run the notebook to explore)"
        )
        return snapshot_html(self._frame(), controls)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
        data = {**data, "text/html": self.snapshot()}
        data["text/plain"] = f"Explorer({self._runner.prompt!r}, {len(self.removed)} heads removed)"
        return data, metadata


def explore(
    model: TransformerBridge,
    prompt: str,
    order_or_mask: HeadMask | Sequence[Head] | None = None,
    *,
    targets: Sequence[int | str] | int | str | None = None,
    alpha: float = 0.0,
    gate: Gate = "value",
    order: str | None = None,
    k: int = 0,
    removed: Sequence[Head] | None = None,
    planted: Mapping[str, Sequence[Head]] | None = None,
    max_new_tokens: int = 12,
    top_k: int = 5,
    lens_k: int = 5,
    max_k: int | None = None,
    seed: int = 0,
    formatted: bool = False,
    color_by: str | None = None,
    batch_size: int | None = None,
    cache_size: int = 256,
    progress: bool = True,
) -> Explorer:
    """An interactive view of `prompt` on `model` with heads removed: a Jupyter widget.

    `order_or_mask` is a `HeadMask` (the slider follows its weight order, the grid shows its
    logits), a list of `(layer, head)` (the slider follows it) or None (a random order only).
    `targets` are tracked tokens (ids or text, as in `removal_sweep`); with them the influence order
    (the first `max_k` heads of the main order re-ordered by how far each raised the first target's
    rank, at alpha 0) is offered too. On the built-in organism the planted pathways S_t are marked
    (`planted`, task -> heads, marks others).

    The widget shows a heads grid (click a head to remove or restore it; shift-click to see its
    attention), a slider "remove the first k heads" of an order, the gate (a key of `gates.GATES`:
    `"value"`, with `alpha` for removed heads, or `"query"`) and, for the current set, the greedy continuation of
    `max_new_tokens` tokens with the tokens that differ from the full model marked, the ranks and
    logits of the tracked tokens (the full model's `top_k` and the targets), the logit lens (top
    tokens of each layer's residual stream) and the selected head's attention from the last prompt
    token.

    The slider's order is precomputed once as a batched `removal_sweep` of its first `max_k` heads
    (default: all) under the starting gate; any other set runs one gated greedy pass. Results are
    cached per (set, alpha, gate), up to `cache_size` sets. Start with `order` (default: the main
    order), `k`, `removed` (a set of your own instead of the first `k`) and `color_by` (`"mask"`,
    `"rank"` or `"attention"`, the share of attention on target tokens of the prompt). `seed`
    fixes the random order; `formatted`, `batch_size` and `progress` are `removal_sweep`'s.
    """
    check_int("k", k, minimum=0)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_int("top_k", top_k, minimum=0)
    check_int("lens_k", lens_k, minimum=1)
    check_int("cache_size", cache_size, minimum=1)
    alpha = check_gate(gate, alpha)
    if isinstance(targets, (int, str)):
        targets = [targets]
    runner = ExplorerRunner(
        model,
        prompt,
        order_or_mask,
        targets=list(targets or []),
        top_k=top_k,
        lens_k=lens_k,
        max_new_tokens=max_new_tokens,
        max_k=max_k,
        seed=seed,
        formatted=formatted,
        batch_size=batch_size,
        cache_size=cache_size,
    )
    order = runner.main if order is None else order
    if order not in runner.orders:
        raise ValueError(f"order must be one of {list(runner.orders)} here, got {order!r}")
    if k > runner.max_k:
        raise ValueError(f"k={k} exceeds max_k={runner.max_k}")
    if planted is None:
        planted = load_planted() if fingerprint(model, content=False).name == "organism" else {}
    if color_by is not None and color_by not in ("mask", "rank", "attention"):
        raise ValueError(f"color_by must be 'mask', 'rank' or 'attention', got {color_by!r}")
    return Explorer(
        runner,
        planted=planted,
        alpha=alpha,
        gate=gate,
        order=order,
        k=k,
        removed=removed,
        selected=None,
        color_by=color_by or "",
        progress=progress,
    )
