"""Head-finding methods, each against a plain reference computation, and on a model with known heads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from headsup_lens import HeadMask, fingerprint, load_model
from headsup_lens.analysis import METHODS, head_scores, mean_z, register_method
from headsup_lens.analysis._methods._base import example_batch
from headsup_lens.data import Task, tokenize_pairs
from headsup_lens.evaluation import answer_loss
from headsup_lens.gates import value_gate

from ..training.planted import SUPPRESSORS, build_planted_dir, planted_task

PAIRS = [("cat", "dog"), ("apple pie", "pear"), ("sun", "moon and stars"), ("ab", "b"), ("tree", "leaf")]


def small_task() -> Task:
    return Task.from_pairs("small", [*PAIRS, ("x", "y")], n_eval=1)  # train split = PAIRS


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return load_model(build_planted_dir(tmp_path_factory.mktemp("planted")), device="cpu", dtype="float32")


def plain_loss(model, pair, hooks=()) -> torch.Tensor:
    """One example, unpadded, full logits: its mean answer-token cross-entropy."""
    batch = tokenize_pairs(model, [pair])
    with model.hooks(fwd_hooks=list(hooks)):
        logits = model(batch.input_ids)
    return F.cross_entropy(logits[0, :-1], batch.labels[0, 1:], ignore_index=-100)


@pytest.mark.parametrize("ablation", ["zero", "scaled"])
def test_batched_single_ablation_equals_separate_runs(llama, ablation):
    task = small_task()
    result = head_scores(llama, task, "single_ablation", ablation=ablation, alpha=0.3, max_rows=7)
    alpha = 0.3 if ablation == "scaled" else 0.0
    full = answer_loss(llama, task, split="train", alpha=alpha, mask=HeadMask.full(llama))
    for layer in range(llama.cfg.n_layers):
        for head in (0, llama.cfg.n_heads - 1):
            alone = answer_loss(
                llama, task, split="train", alpha=alpha, mask=HeadMask.from_heads([(layer, head)], fingerprint(llama))
            )
            assert result.scores[layer, head].item() == pytest.approx(full - alone, abs=2e-5)
    assert result.settings["full_loss"] == pytest.approx(full, rel=1e-5)
    assert (
        result.seconds > 0
        and result.cpu_seconds > 0
        and result.task == "small"
        and len(result.order) == result.scores.numel()
    )


def test_mean_ablation_gate_equals_replacing_z_by_hand(llama):
    batch = example_batch(llama, small_task(), "train", None)
    mean = mean_z(llama, batch, max_rows=2)
    # mean over non-padding positions, by hand
    zs = []
    for pair in PAIRS:
        one = tokenize_pairs(llama, [pair])
        seen = {}
        with llama.hooks(fwd_hooks=[("blocks.1.attn.hook_z", lambda z, hook: seen.setdefault("z", z.detach()))]):
            llama(one.input_ids)
        zs.append(seen["z"][0])
    assert torch.allclose(mean[1], torch.cat(zs).mean(0), atol=1e-5)
    mask = torch.ones(llama.cfg.n_layers, llama.cfg.n_heads)
    mask[1, 2] = mask[0, 5] = 0.0

    def replace(z, hook):
        z = z.clone()
        layer = int(hook.name.split(".")[1])
        for head in range(llama.cfg.n_heads):
            if mask[layer, head] == 0:
                z[:, :, head] = mean[layer, head]
        return z

    tokens = tokenize_pairs(llama, PAIRS[:2]).input_ids
    with llama.hooks(fwd_hooks=[(f"blocks.{l}.attn.hook_z", replace) for l in range(llama.cfg.n_layers)]):
        expected = llama(tokens)
    with value_gate(llama, mask, mean=mean):
        got = llama(tokens)
    assert torch.allclose(got, expected, atol=1e-5)
    with (
        pytest.raises(ValueError, match=r"mean must be \[n_layers, n_heads, d_head\]"),
        value_gate(llama, mask, mean=mean[0]),
    ):
        pass


def test_single_mean_ablation_equals_separate_runs(llama):
    task = small_task()
    result = head_scores(llama, task, "single_ablation", ablation="mean")
    mean = mean_z(llama, example_batch(llama, task, "train", None))
    full = torch.stack([plain_loss(llama, p) for p in PAIRS]).mean()
    mask = torch.ones(llama.cfg.n_layers, llama.cfg.n_heads)
    mask[1, 3] = 0.0
    with value_gate(llama, mask, mean=mean):
        alone = torch.stack([plain_loss(llama, p) for p in PAIRS]).mean()
    assert result.scores[1, 3].item() == pytest.approx((full - alone).item(), abs=2e-5)


def hand_gradients(model, hook_name="attn.hook_z"):
    """Per example and layer: z and dL/dz (a leaf replacing z in one layer, plain full logits)."""
    out = []
    for pair in PAIRS:
        per_layer = []
        for layer in range(model.cfg.n_layers):
            leaf = {}

            def swap(z, hook):
                leaf["z"] = z.detach().requires_grad_(True)
                return leaf["z"]

            with torch.enable_grad():
                loss = plain_loss(model, pair, [(f"blocks.{layer}.{hook_name}", swap)])
                (grad,) = torch.autograd.grad(loss, leaf["z"])
            per_layer.append((leaf["z"].detach()[0], grad[0]))
        out.append(per_layer)
    return out


def test_attribution_patching_and_gate_gradient_equal_hand_computations(llama):
    task = small_task()
    grads = hand_gradients(llama)
    # zero ablation: E_x sum dL/dz . z ; Michel: E_x |dL/dxi| with dL/dxi = sum dL/dz . z
    per_example = torch.stack([torch.stack([(g * z).sum((0, 2)) for z, g in ex]) for ex in grads])
    expected = per_example.mean(0)
    attribution = head_scores(llama, task, "attribution_patching", max_rows=2)
    assert torch.allclose(attribution.scores, expected, rtol=1e-4, atol=1e-6)
    michel = head_scores(llama, task, "gate_gradient", max_rows=3)
    assert torch.allclose(michel.scores, -per_example.abs().mean(0), rtol=1e-4, atol=1e-6)
    # scaled: (1 - alpha) z ; mean: z - mean
    scaled = head_scores(llama, task, "attribution_patching", ablation="scaled", alpha=0.25)
    assert torch.allclose(scaled.scores, 0.75 * expected, rtol=1e-4, atol=1e-6)
    mean = mean_z(llama, example_batch(llama, task, "train", None))
    by_mean = torch.stack(
        [torch.stack([(g * (z - mean[l])).sum((0, 2)) for l, (z, g) in enumerate(ex)]) for ex in grads]
    ).mean(0)
    got = head_scores(llama, task, "attribution_patching", ablation="mean")
    assert torch.allclose(got.scores, by_mean, rtol=1e-4, atol=1e-6)


def test_methods_find_the_planted_suppressors(planted):
    """On a model whose hindering heads are known, the ablation-based rankings put them first."""
    task = planted_task(n=40)
    truth = set(SUPPRESSORS)
    for method, options in [
        ("single_ablation", {}),
        ("attribution_patching", {}),
        ("soft_gate_necessary", {"steps": 40, "lr": 0.2}),
    ]:
        result = head_scores(planted, task, method, n_examples=8, **options)
        assert set(result.order[: len(truth)]) == truth, method
    assert set(head_scores(planted, task, "random").order[:4]) != truth


def test_learned_mask_order_is_the_papers_and_random_is_seeded(llama):
    logits = torch.randn(llama.cfg.n_layers, llama.cfg.n_heads, generator=torch.Generator().manual_seed(2))
    mask = HeadMask.from_logits(logits, fingerprint(llama))
    result = head_scores(llama, small_task(), "learned_mask", mask=mask)
    assert result.order == mask.removal_order() and result.settings["source"] == "given"
    assert result.removal_mask(3).removed_heads() == sorted(mask.removal_order()[:3])
    a, b = (head_scores(llama, small_task(), "random", seed=s) for s in (1, 1))
    assert a.order == b.order != head_scores(llama, small_task(), "random", seed=2).order


def test_registry_refuses_duplicates_and_unknown_names(llama):
    with pytest.raises(ValueError, match="'random' is registered twice"):
        register_method("random", "again")(lambda context: None)
    with pytest.raises(ValueError, match="method must be one of"):
        head_scores(llama, small_task(), "no_such_method")
    with pytest.raises(ValueError, match="ablation must be one of"):
        head_scores(llama, small_task(), "single_ablation", ablation="resample")
    assert {
        "learned_mask",
        "single_ablation",
        "gate_gradient",
        "attribution_patching",
        "activation_pattern",
        "soft_gate_necessary",
        "soft_gate_sufficient",
        "random",
    } <= set(METHODS)


def test_unknown_method_options_are_named(llama):
    with pytest.raises(ValueError, match=r"method 'random' takes no option 'steps'; its options are none"):
        head_scores(llama, small_task(), "random", steps=3)
    with pytest.raises(ValueError, match=r"takes no option 'step'; its options are \['l1', 'steps', 'lr', 'init'\]"):
        head_scores(llama, small_task(), "soft_gate_necessary", step=3)


def test_head_scores_save_and_load(llama, tmp_path):
    from headsup_lens.analysis import HeadScores

    result = head_scores(llama, small_task(), "random", seed=4)
    back = HeadScores.load(result.save(tmp_path / "r.json"))
    assert torch.equal(back.scores, result.scores) and back.order == result.order
    assert (back.method, back.task, back.seconds, back.cpu_seconds) == (
        result.method,
        result.task,
        result.seconds,
        result.cpu_seconds,
    )
    with pytest.raises(ValueError, match="head scores file .*missing.json.: does not exist"):
        HeadScores.load(tmp_path / "missing.json")
