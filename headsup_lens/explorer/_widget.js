// The page side of the pathway explorer (an anywidget module): it draws the controls, inserts the
// grid and panes that the kernel renders (trait `html`) and sends clicks and control changes back as
// traits. All model work and all rendering of results happen in Python (headsup_lens/explorer).

function make(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text) node.textContent = text;
  return node;
}

function labelled(text, control, extra) {
  const label = make("label", { class: "hl-control" });
  label.append(make("span", { class: "hl-control-name" }, text), control);
  if (extra) label.append(extra);
  return label;
}

function setOptions(select, options) {
  const current = select.value;
  select.replaceChildren(
    ...options.map(([value, text]) => make("option", { value: String(value) }, text ?? String(value)))
  );
  if (options.some(([value]) => String(value) === current)) select.value = current;
}

const sameHead = (a, b) => a.length === 2 && b.length === 2 && a[0] === b[0] && a[1] === b[1];

function render({ model, el }) {
  const root = make("div", { class: "hl-explorer", "data-busy": "false" });
  const controls = make("div", { class: "hl-controls" });
  const order = make("select", { class: "hl-order", "aria-label": "removal order" });
  const slider = make("input", { type: "range", class: "hl-k", min: "0", step: "1", "aria-label": "remove the first k heads" });
  const kText = make("output", { class: "hl-k-value" });
  const alpha = make("input", { type: "range", class: "hl-alpha", min: "0", max: "1", step: "0.05", "aria-label": "alpha" });
  const alphaText = make("output", { class: "hl-alpha-value" });
  const gate = make("select", { class: "hl-gate", "aria-label": "gate" });
  const colour = make("select", { class: "hl-color", "aria-label": "colour the grid by" });
  const mode = make("select", { class: "hl-mode", "aria-label": "what a click does" });
  setOptions(mode, [["remove", "removes / restores"], ["inspect", "shows its attention"]]);
  const reset = make("button", { class: "hl-reset", type: "button" }, "restore all heads");
  const sweep = make("button", { class: "hl-precompute", type: "button" }, "precompute this sweep");
  const busy = make("span", { class: "hl-busy", role: "status", "aria-live": "polite" });
  const body = make("div", { class: "hl-body" });

  controls.append(
    labelled("order", order),
    labelled("remove the first k heads", slider, kText),
    labelled("gate", gate),
    labelled("α", alpha, alphaText),
    labelled("colour by", colour),
    labelled("a click", mode),
    reset,
    sweep,
    busy
  );
  root.append(controls, body);
  el.replaceChildren(root);

  // The page shows "running" from a change it sends until the kernel's picture shows that state
  // (the picture carries the traits it was drawn for), or while the kernel says the model runs.
  const drawnFor = () => {
    const view = body.querySelector(".hl-view");
    return view ? JSON.parse(view.dataset.state) : null;
  };
  const sameSet = (a, b) =>
    a.length === b.length && a.every((h) => b.some((g) => sameHead(h, g)));
  const upToDate = () => {
    const drawn = drawnFor();
    if (drawn === null) return false;
    return (
      sameSet(drawn.removed, model.get("removed")) &&
      drawn.k === model.get("k") &&
      drawn.order === model.get("order") &&
      drawn.gate === model.get("gate") &&
      Math.abs(drawn.alpha - model.get("alpha")) < 1e-12 &&
      (drawn.selected.length === 0 ? model.get("selected").length === 0 : sameHead(drawn.selected, model.get("selected"))) &&
      drawn.color_by === model.get("color_by")
    );
  };
  const showBusy = () => {
    const running = model.get("busy") || !upToDate();
    root.dataset.busy = String(running);
    busy.textContent = running ? model.get("status") || "running the model…" : "";
    busy.classList.toggle("hl-running", running);
  };
  const setPending = showBusy;

  const swept = () =>
    (model.get("config").swept || []).some(
      ([name, a, g]) => name === model.get("order") && a === model.get("alpha") && g === model.get("gate")
    );

  const scales = (name) => (model.get("config").gates || []).some(([g, , alpha]) => g === name && alpha);

  const drawControls = () => {
    const config = model.get("config");
    setOptions(order, config.orders || []);
    // [name, label, whether alpha applies] per gate, from the gate registry (gates.GATES) in Python
    setOptions(gate, (config.gates || []).map(([name, label]) => [name, label]));
    setOptions(colour, config.color_by || []);
    slider.max = String(config.max_k ?? 0);
    order.value = model.get("order");
    gate.value = model.get("gate");
    colour.value = model.get("color_by");
    if (!slider.matches(":active")) slider.value = String(model.get("k"));
    kText.textContent = slider.value;
    alpha.value = String(model.get("alpha"));
    alpha.disabled = !scales(model.get("gate"));
    alphaText.textContent = Number(model.get("alpha")).toFixed(2);
    sweep.hidden = swept();
  };

  const drawBody = () => {
    body.innerHTML = model.get("html");
    showBusy();
  };

  const commit = () => {
    model.save_changes();
    setPending();
  };

  // The slider scrubs a precomputed sweep while it moves; without one, each step runs the model, so
  // it sends only where it is let go.
  let lastSent = 0;
  let trailing = null;
  const sendK = () => {
    const k = Number(slider.value);
    if (k !== model.get("k")) {
      model.set("k", k);
      commit();
    }
    lastSent = performance.now();
  };
  slider.addEventListener("input", () => {
    kText.textContent = slider.value;
    if (!swept()) return;
    clearTimeout(trailing);
    const wait = 40 - (performance.now() - lastSent);
    if (wait <= 0) sendK();
    else trailing = setTimeout(sendK, wait);
  });
  slider.addEventListener("change", () => {
    clearTimeout(trailing);
    sendK();
  });
  order.addEventListener("change", () => {
    model.set("order", order.value);
    commit();
  });
  gate.addEventListener("change", () => {
    if (!scales(gate.value)) model.set("alpha", 0);
    model.set("gate", gate.value);
    commit();
  });
  alpha.addEventListener("input", () => {
    alphaText.textContent = Number(alpha.value).toFixed(2);
  });
  alpha.addEventListener("change", () => {
    model.set("alpha", Number(alpha.value));
    commit();
  });
  colour.addEventListener("change", () => {
    model.set("color_by", colour.value);
    commit();
  });
  reset.addEventListener("click", () => {
    model.set("removed", []);
    commit();
  });
  sweep.addEventListener("click", () => {
    model.send({ do: "precompute" });
    setPending();
  });

  const act = (cell, inspect) => {
    const head = [Number(cell.dataset.layer), Number(cell.dataset.head)];
    if (inspect) {
      model.set("selected", sameHead(model.get("selected"), head) ? [] : head);
    } else {
      const removed = model.get("removed").map((h) => [h[0], h[1]]);
      const at = removed.findIndex((h) => sameHead(h, head));
      if (at >= 0) removed.splice(at, 1);
      else removed.push(head);
      model.set("removed", removed);
      cell.classList.toggle("hl-removed"); // shown at once; the kernel's next picture confirms it
    }
    commit();
  };
  body.addEventListener("click", (event) => {
    const cell = event.target.closest("td[data-head]");
    if (cell && body.contains(cell)) act(cell, event.shiftKey || mode.value === "inspect");
  });
  body.addEventListener("keydown", (event) => {
    const cell = event.target.closest("td[data-head]");
    if (cell && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      act(cell, event.shiftKey || mode.value === "inspect");
    }
  });

  const handlers = [
    ["change:html", drawBody],
    ["change:busy", showBusy],
    ["change:removed", showBusy],
    ["change:selected", showBusy],
    ["change:status", showBusy],
    ["change:config", drawControls],
    ["change:k", drawControls],
    ["change:order", drawControls],
    ["change:alpha", drawControls],
    ["change:gate", drawControls],
    ["change:color_by", drawControls],
  ];
  for (const [name, handler] of handlers) model.on(name, handler);
  drawControls();
  drawBody();
  showBusy();
  return () => {
    for (const [name, handler] of handlers) model.off(name, handler);
    clearTimeout(trailing);
  };
}

export default { render };
