"""The direct forward pass (gate at the o_proj input, fused attention, shared rows) against the
bridge's hook points (the gate at hook_z): same logits, gradients and greedy continuations."""

import pytest
import torch

from headsup_lens.data import collate
from headsup_lens.gates import direct_path, gate_hooks, value_gate
from headsup_lens.gates._fast._direct import direct_forward
from headsup_lens.models import left_pad, stop_token_ids
from headsup_lens.objective import answer_logits, answer_nll, greedy_generate

from ..conftest import random_mask, random_tokens


def both(fn):
    """`fn()` through the direct forward pass, then through the bridge's hooks."""
    with direct_path(True):
        fast = fn()
    with direct_path(False):
        reference = fn()
    return fast, reference


def right_padded(model, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lengths = [(5, 2), (3, 3), (7, 1), (4, 2)]
    rows = [
        (torch.randint(4, model.cfg.d_vocab, (p,), generator=generator).tolist(), [int(t) for t in range(4, 4 + a)])
        for p, a in lengths
    ]
    return collate(rows, pad_id=0)


@pytest.mark.parametrize("name", ["llama", "qwen2", "spm"])
def test_direct_forward_serves_llama_and_qwen2_and_steps_aside(name, request, gpt2):
    model = request.getfixturevalue(name)
    assert direct_forward(model) is not None
    with direct_path(False):
        assert direct_forward(model) is None
    with value_gate(model, random_mask(model)):  # any hook on the model: only the bridge runs it
        assert direct_forward(model) is None
    assert direct_forward(gpt2) is None


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize(
    "gate",
    ["none", "shared", "per_row", "alpha", "mean", "mlp"],
)
def test_answer_logits_equal_the_hook_z_gate(name, gate, request):
    model = request.getfixturevalue(name)
    batch = right_padded(model)
    n_layers, n_heads, d_head = model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head
    options = {
        "none": dict(mask=None),
        "shared": dict(mask=random_mask(model, seed=1)),
        "per_row": dict(mask=random_mask(model, seed=2, rows=4)),
        "alpha": dict(mask=random_mask(model, seed=3, rows=4), alpha=0.25),
        "mean": dict(mask=random_mask(model, seed=4), mean=torch.randn(n_layers, n_heads, d_head)),
        "mlp": dict(mask=random_mask(model, seed=5), mlp=torch.tensor([1.0, 0.0] * (n_layers // 2))),
    }[gate]
    hooks = gate_hooks(model, options.pop("mask"), **options)

    def logits():
        with torch.no_grad():
            return answer_logits(model, batch, hooks)[0]

    fast, reference = both(logits)
    assert torch.allclose(fast, reference, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_mask_gradient_equals_the_hook_z_gate(name, request):
    model = request.getfixturevalue(name)
    batch = right_padded(model, seed=1)

    def gradient():
        soft = torch.full((4, model.cfg.n_layers, model.cfg.n_heads), 0.7, requires_grad=True)
        nll, _ = answer_nll(model, batch, gate_hooks(model, soft))
        nll.sum().backward()
        return soft.grad

    fast, reference = both(gradient)
    assert torch.allclose(fast, reference, atol=1e-5, rtol=1e-4)


def test_left_padded_prompts_and_per_row_masks_decode_as_the_bridge(qwen2):
    prompts = [random_tokens(qwen2, 1, n, seed=n)[0].tolist() for n in (6, 3, 8, 5)]
    ids, attention = left_pad(prompts, pad_id=0)
    masks = random_mask(qwen2, seed=7, p_keep=0.8, rows=4)

    def decode():
        out = greedy_generate(
            qwen2, ids, attention, max_new_tokens=6, stops=stop_token_ids(qwen2), mask=masks, record_layers=True
        )
        return out

    fast, reference = both(decode)
    assert fast.tokens == reference.tokens
    assert torch.allclose(fast.first_logits, reference.first_logits, atol=1e-4, rtol=1e-4)
    assert sorted(fast.layers) == sorted(reference.layers)
    for name in fast.layers:
        assert torch.allclose(fast.layers[name], reference.layers[name], atol=1e-4, rtol=1e-4), name


def test_rows_that_share_tokens_and_gates_are_computed_once_and_equal_their_own_pass(llama):
    """Sweep-like rows: one prompt, masks that differ only in some layers, duplicated rows. Each row
    equals its own unbatched pass, and the direct pass computes fewer rows than the batch has."""
    import headsup_lens.gates._fast._direct as direct

    prompt = random_tokens(llama, 1, 9, seed=3)
    base = random_mask(llama, seed=8, p_keep=0.9)
    masks = base.repeat(6, 1, 1)
    masks[1, 1, 0] = 0.0  # differs in the last layer only
    masks[2, 0, 3] = 0.0  # differs from layer 0 on
    masks[4] = masks[1]  # a duplicate
    masks[5, 1, 5] = 0.0
    groups = []
    original = direct._plan

    def counting(history, codes):
        plan = original(history, codes)
        groups.append([len(r) for r in plan.rep])
        return plan

    direct._plan = counting
    try:
        out = greedy_generate(
            llama, prompt.expand(6, -1), max_new_tokens=5, stops=stop_token_ids(llama), mask=masks, record_layers=True
        )
    finally:
        direct._plan = original
    assert groups[0][0] == 1 and groups[0][1] < 6  # one prompt: layer 0 once, layer 1 for 3 gate prefixes
    with direct_path(False):
        for row in range(6):
            alone = greedy_generate(
                llama, prompt, max_new_tokens=5, stops=stop_token_ids(llama), mask=masks[row], record_layers=True
            )
            assert out.tokens[row] == alone.tokens[0]
            assert torch.allclose(out.first_logits[row], alone.first_logits[0], atol=1e-4, rtol=1e-4)
            for name, value in alone.layers.items():
                assert torch.allclose(out.layers[name][row], value[0], atol=1e-4, rtol=1e-4), name


def test_prompt_pass_unembeds_one_position_per_row(llama):
    """Greedy decoding scores only what it reads: the last prompt position of each computed row."""
    shapes = []
    # The wrapped unembedding (lm_head): every path (bridge, direct, native) ends there.
    lm_head = llama.unembed.original_component
    handle = lm_head.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        prompt = random_tokens(llama, 3, 10, seed=4)
        greedy_generate(llama, prompt, max_new_tokens=1, stops=set(), mask=random_mask(llama, rows=3))
    finally:
        handle.remove()
    assert [s[-1] for s in shapes] == [llama.cfg.d_model]
    assert torch.Size(shapes[0]).numel() == 3 * llama.cfg.d_model


def test_per_row_masks_must_match_the_batch(llama):
    prompt = random_tokens(llama, 4, 6)
    with pytest.raises(ValueError, match="mask has 3 rows"):
        greedy_generate(llama, prompt, max_new_tokens=2, stops=set(), mask=random_mask(llama, rows=3))
