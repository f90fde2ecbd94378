"""The pathway explorer, Python side: what it shows for a set of removed heads equals the library's own
computations of that set (a gated greedy generation, a removal sweep's step, the logit lens, the
attention pattern), its traits round-trip, and its cache returns the same results.

The real-browser test (JupyterLab driven by Chromium) is `test_browser.py`."""

from __future__ import annotations

import functools

import pytest
import torch
import traitlets

import headsup_lens as hl
from headsup_lens import HeadMask, organism, query_gate, removal_sweep, value_gate
from headsup_lens.analysis import influence_order, last_position_attention, random_order
from headsup_lens.models import encode, prompt_format, stop_token_ids

pytest.importorskip("anywidget")

MAX_NEW = 8


@pytest.fixture(scope="module")
def model():
    return hl.load_model("organism", device="cpu")


@pytest.fixture(scope="module")
def example(model):
    word, answer = hl.load_task("organism/reverse").eval_pairs[0]
    mask = organism.planted_mask(organism.load_planted(), "reverse", model)
    return word, answer, mask


@pytest.fixture
def explorer(model, example):
    word, answer, mask = example
    return hl.explore(model, word, mask, targets=[answer], max_new_tokens=MAX_NEW, progress=False)


def greedy_reference(model, prompt, gate_cm):
    """The plain reference: `model.generate` greedily under a gate, cut at the first stop token, and
    the next-token logits of the prompt."""
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(prompt), add_bos=template.add_bos)])
    with torch.no_grad(), gate_cm:
        logits = model(ids)[0, -1]
        out = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, verbose=False, return_type="tokens")
    new = out[0, ids.shape[1] :].tolist()
    stops = stop_token_ids(model)
    return new[: next((i for i, t in enumerate(new) if t in stops), len(new))], logits


SETS = {
    "planted minus one": lambda planted: planted[1:],
    "planted plus two": lambda planted: [*planted, (0, 0), (7, 15)],
    "five heads": lambda planted: [(0, 3), (2, 9), (4, 1), (6, 6), (7, 2)],
}


@pytest.mark.parametrize("name", SETS)
def test_a_clicked_set_shows_the_value_gate_greedy_continuation(model, example, explorer, name):
    word, _, mask = example
    removed = SETS[name](mask.removed_heads())
    explorer.set_state({"removed": [list(h) for h in removed]})  # what a click sends from the page
    ids, logits = greedy_reference(model, word, value_gate(model, HeadMask.from_heads(removed, model)))
    assert explorer.view.source == "pass"
    assert list(explorer.view.generation_ids) == ids
    assert explorer.generation == model.tokenizer.decode(ids)
    assert f'data-generation="{explorer.generation}"' in explorer.html
    # Tracked tokens: rank 1 + the number of tokens with a larger logit, logits at a float32 tolerance.
    tracked = explorer.view.tracked
    expected = [int((logits > logits[t]).sum()) + 1 for t in tracked.token_id]
    assert tracked["rank"].tolist() == expected
    torch.testing.assert_close(torch.tensor(tracked.logit.tolist()), logits[tracked.token_id.tolist()].float())
    # Tokens that differ from the full model are marked.
    full = explorer.runner.full_view().generation_ids
    differing = sum(i >= len(full) or full[i] != t for i, t in enumerate(ids))
    assert explorer.html.count("hl-tok hl-diff") == differing


def test_the_slider_shows_the_removal_sweep_step(model, example, explorer):
    word, answer, mask = example
    sweep = removal_sweep(model, word, mask, target_tokens=[answer], max_new_tokens=MAX_NEW, progress=False)
    order = mask.removal_order()
    for k in (0, 5, 12, 40, len(order)):
        explorer.k = k
        assert explorer.removed == order[:k]
        assert explorer.view.source == "sweep"
        assert explorer.generation == sweep.generations[k]
        assert explorer.view.tracked["rank"].tolist() == sweep.ranks[sweep.tokens.label].iloc[k].tolist()
    explorer.k = 12  # the planted pathway removed: the organism reverses the word
    assert explorer.generation == sweep.generations[12] != sweep.generations[0]

    explorer.order = "random"
    explorer.k = 10
    expected = removal_sweep(model, word, random_order(model, 0), max_new_tokens=MAX_NEW, progress=False)
    assert explorer.removed == random_order(model, 0)[:10]
    assert explorer.generation == expected.generations[10] and explorer.view.source == "sweep"

    explorer.order = "influence"
    assert explorer.runner.order("influence") == influence_order(sweep)
    assert explorer.removed == influence_order(sweep)[:10]


def test_the_logit_lens_and_attention_panes_are_the_library_s(model, example, explorer):
    word, _, mask = example
    removed = [*mask.removed_heads()[:6], (7, 15)]
    explorer.removed = removed
    explorer.selected = [3, 4]
    gated = HeadMask.from_heads(removed, model)
    lens = hl.logit_lens(model, word, k=5, mask=gated, streams=("resid",)).table
    shown = explorer.view.lens
    assert shown.token_id.tolist() == lens.token_id.tolist()
    torch.testing.assert_close(torch.tensor(shown.prob.tolist()), torch.tensor(lens.prob.tolist()), atol=1e-5, rtol=0)
    attention = explorer.runner.attention(removed, 0.0, "value")
    torch.testing.assert_close(attention, last_position_attention(model, word, gated))
    assert "Attention of L3 H4" in explorer.html


@pytest.mark.parametrize("gate, alpha", [("value", 0.5), ("query", 0.0)])
def test_alpha_and_the_query_gate_match_the_gates(model, example, explorer, gate, alpha):
    word, answer, mask = example
    removed = mask.removed_heads()
    gated = HeadMask.from_heads(removed, model)
    explorer.state = hl.explorer.ExplorerState(removed=tuple(removed), alpha=alpha, gate=gate, order="weight", k=12)
    gate_cm = query_gate(model, gated) if gate == "query" else value_gate(model, gated, alpha=alpha)
    ids, _ = greedy_reference(model, word, gate_cm)
    assert list(explorer.view.generation_ids) == ids
    # No sweep exists under this setting yet: the slider's sets run gated passes; `precompute` sweeps.
    assert [name for name, *_ in explorer.config["swept"]] == ["weight"]
    explorer.k = 20
    assert explorer.view.source == "pass"
    pass_ids = explorer.view.generation_ids
    explorer.runner.views.items.clear()  # forget the pass: the view is read from the sweep next
    explorer.precompute()
    explorer.k = 19
    explorer.k = 20
    sweep = removal_sweep(
        model, word, mask, target_tokens=[answer], max_new_tokens=MAX_NEW, gate=gate, alpha=alpha, progress=False
    )
    assert explorer.view.source == "sweep"
    assert explorer.generation == sweep.generations[20]
    assert list(pass_ids) == sweep.generation_ids[20]


def test_traits_round_trip(model, example, explorer):
    _, _, mask = example
    explorer.removed = [(1, 2), (0, 5), (1, 2)]  # a repeated head counts once
    assert explorer.removed == [(1, 2), (0, 5)]
    assert explorer.to_mask().removed_heads() == [(0, 5), (1, 2)]
    assert explorer.to_mask().metadata["gate"] == "value"
    explorer.alpha = 0.25
    explorer.selected = [2, 3]
    saved = explorer.state
    assert saved == hl.explorer.ExplorerState(((1, 2), (0, 5)), 0.25, "value", "weight", 0, (2, 3))
    generation = explorer.generation
    explorer.k = 30
    explorer.alpha = 0.0
    explorer.selected = []
    assert explorer.removed == mask.removal_order()[:30]
    explorer.state = saved
    assert explorer.state == saved and explorer.generation == generation
    with pytest.raises(traitlets.TraitError):
        explorer.generation = "something else"  # read-only
    with pytest.raises(ValueError, match="outside"):
        explorer.removed = [(8, 0)]
    with pytest.raises(traitlets.TraitError, match="alpha=0"):
        explorer.gate = "query"  # alpha is 0.25
    with pytest.raises(ValueError, match="alpha"):
        explorer.alpha = 1.5
    with pytest.raises(ValueError, match="k"):
        explorer.k = 129
    with pytest.raises(traitlets.TraitError, match="order"):
        explorer.order = "alphabetical"
    assert explorer.state == saved  # refused values changed nothing


def test_the_cache_returns_identical_results(model, example, explorer):
    cache = explorer.runner.views
    explorer.removed = [(0, 1), (3, 3)]
    first = explorer.view
    misses = cache.misses
    explorer.removed = [(5, 5)]
    explorer.removed = [(3, 3), (0, 1)]  # the same set in another order
    assert explorer.view is first
    assert cache.misses == misses + 1 and cache.hits > 0
    html = explorer.html
    updates = len(explorer.update_seconds)
    explorer.removed = [(5, 5)]
    explorer.removed = [(0, 1), (3, 3)]
    assert explorer.html == html
    assert len(explorer.update_seconds) == updates + 2  # one update per change


def test_the_static_snapshot_shows_the_view(model, example, explorer):
    """An exported notebook shows the `text/html` of the bundle (its widget view needs a live kernel)."""
    explorer.k = 12
    data, _ = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    snapshot = data["text/html"]
    assert "<script" not in snapshot and "<style>" in snapshot
    assert snapshot.count("data-head=") == model.cfg.n_layers * model.cfg.n_heads
    assert snapshot.count('class="hl-head hl-removed') == 12
    assert f'data-generation="{explorer.generation}"' in snapshot
    assert "planted: reverse" in snapshot  # the organism's planted heads are marked


def test_the_page_side_ships_with_the_package(explorer):
    from headsup_lens.explorer import Explorer

    assert "export default" in str(Explorer._esm) and "hl-explorer" in str(Explorer._css)
    assert explorer.config["n_layers"] == 8 and explorer.config["max_k"] == 128
    explorer._on_message(explorer, {"do": "precompute"}, [])  # the page's "precompute" button


def test_explore_refuses_what_it_cannot_show(model, example):
    word, answer, mask = example
    with pytest.raises(ValueError, match="query gate takes alpha=0"):
        hl.explore(model, word, mask, gate="query", alpha=0.5)
    with pytest.raises(ValueError, match="order must be one of"):
        hl.explore(model, word, mask, order="influence")  # the influence order needs targets
    with pytest.raises(ValueError, match="max_k"):
        hl.explore(model, word, mask, max_k=500)
    small = hl.explore(model, word, [(0, 1), (2, 2)], targets=[answer], max_new_tokens=4, progress=False)
    assert small.config["max_k"] == 2 and small.order == "given"
    assert small.config["color_by"] == [["rank", "order rank"], ["attention", "attention on target"]]


def test_query_alpha_reference_is_not_the_value_gate(model, example):
    """The gates' references differ on this set, so the tests above tell them apart."""
    word, _, mask = example
    gated = HeadMask.from_heads(mask.removed_heads(), model)
    value, _ = greedy_reference(model, word, value_gate(model, gated))
    others = [
        greedy_reference(model, word, cm)[0]
        for cm in (functools.partial(value_gate, alpha=0.5)(model, gated), query_gate(model, gated))
    ]
    assert all(other != value for other in others)


def test_a_refused_state_changes_nothing(model, example, explorer):
    """Setting a state is all or nothing: one bad field leaves every trait and the page as they were."""
    explorer.removed = [(1, 2)]
    before, html = explorer.state, explorer.html
    bad = hl.explorer.ExplorerState(removed=((99, 0),), alpha=0.5, gate="value", order="random", k=3)
    with pytest.raises(ValueError, match=r"removed: head \(99, 0\) is outside"):
        explorer.state = bad
    assert explorer.state == before and explorer.html == html
    for state in (
        hl.explorer.ExplorerState(((0, 1),), 0.5, "query", "random", 3),  # alpha with the query gate
        hl.explorer.ExplorerState(((0, 1),), 0.5, "value", "alphabetical", 3),
        hl.explorer.ExplorerState(((0, 1),), 0.5, "value", "random", 500),
        hl.explorer.ExplorerState(((0, 1),), 0.5, "value", "random", 3, (8, 0)),
        hl.explorer.ExplorerState(((-1, 0),), 0.5, "value", "random", 3),
    ):
        with pytest.raises((ValueError, traitlets.TraitError)):
            explorer.state = state
        assert explorer.state == before and explorer.html == html


@pytest.mark.parametrize(
    ("heads", "match"),
    [
        ([(-1, 0)], r"removed: head \(-1, 0\) is outside"),
        ([(0, -1)], r"removed: head \(0, -1\) is outside"),
        ([(8, 0)], r"removed: head \(8, 0\) is outside"),
        ([(1.5, 0)], "must be an integer"),
        ([(1,)], r"is not a \(layer, head\) pair"),
    ],
)
def test_a_head_outside_the_model_is_refused_everywhere(model, example, explorer, heads, match):
    """A negative index would be Python's last layer: refused by the runner as by the traits."""
    typed = f"{match}|does not have the type it needs"  # the runner's annotations catch some first
    with pytest.raises((ValueError, TypeError), match=typed):
        explorer.runner.view(heads, 0.0, "value")
    with pytest.raises((ValueError, TypeError), match=typed):
        explorer.runner.attention(heads, 0.0, "value")
    with pytest.raises((ValueError, TypeError), match=match):
        explorer.removed = heads
    with pytest.raises(ValueError, match="alpha"):
        explorer.runner.view([(0, 0)], 1.5, "value")
    with pytest.raises(ValueError, match="query gate takes alpha=0"):
        explorer.runner.view([(0, 0)], 0.5, "query")


def test_explore_refuses_bad_planted_heads_and_orders(model, example):
    word, _, _ = example
    with pytest.raises(ValueError, match=r"planted\['mine'\]: head \(99, 0\) is outside"):
        hl.explore(model, word, planted={"mine": [(99, 0)]}, max_k=6, progress=False)
    with pytest.raises(ValueError, match=r"planted\['mine'\]: head \(0, 16\) is outside"):
        hl.explore(model, word, planted={"reverse": [(0, 1)], "mine": [(0, 16)]}, max_k=6, progress=False)
    with pytest.raises(TypeError, match="planted"):
        hl.explore(model, word, planted={"mine": [(1, 2, 3)]}, max_k=6, progress=False)
    with pytest.raises(ValueError, match=r"order_or_mask: head \(0, -3\) is outside"):
        hl.explore(model, word, [(0, -3)], progress=False)
    with pytest.raises(ValueError, match=r"removed: head \(-2, 0\) is outside"):
        hl.explore(model, word, removed=[(-2, 0)], max_k=6, progress=False)
    with pytest.raises(ValueError, match="selected"):
        small = hl.explore(model, word, max_k=6, progress=False)
        small.selected = [1, 2, 3]


def test_explore_resolves_its_targets_before_any_pass(model, example, monkeypatch):
    """Targets are checked when the explorer is made, before a sweep runs: an id outside the
    vocabulary, text with no visible token, two targets of one token. Text is tracked by its first
    token (on the organism's character tokenizer, 'zzzzqqq' is tracked as 'z', and shown so)."""
    from headsup_lens.explorer import _runner

    word, _, _ = example
    ran: list[object] = []
    monkeypatch.setattr(_runner, "removal_sweep", lambda *a, **k: ran.append(a) or pytest.fail("a sweep ran"))
    with pytest.raises(ValueError, match=r"token id 1000000 is outside the vocabulary \(d_vocab=66\)"):
        hl.explore(model, word, targets=[10**6], max_k=6, progress=False)
    with pytest.raises(ValueError, match="empty or whitespace"):
        hl.explore(model, word, targets=["mraf", " "], max_k=6, progress=False)
    with pytest.raises(ValueError, match="targets 'mraf' and 'm' are the same token 'm'"):
        hl.explore(model, word, targets=["mraf", "m"], max_k=6, progress=False)
    assert not ran
    monkeypatch.undo()
    explorer = hl.explore(model, word, targets=["zzzzqqq"], max_k=6, progress=False)
    tracked = explorer.runner.tracked_tokens
    assert tracked[tracked.kind == "target"].label.tolist() == ["target 'z'"]
    assert "a target given as text is tracked by its first token" in explorer.html


def test_a_sweep_refuses_two_targets_of_one_token(model, example):
    word, _, _ = example
    with pytest.raises(ValueError, match="targets 'mraf' and 'mar' are the same token 'm'"):
        hl.removal_sweep(model, word, [(0, 0)], target_tokens=["mraf", "mar"], max_new_tokens=0)
