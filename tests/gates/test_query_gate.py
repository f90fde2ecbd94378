import pytest
import torch

from headsup_lens import query_gate
from headsup_lens.gates import verify_query_gate
from headsup_lens.gates._query import _VERIFIED_ATTR

from ..conftest import random_mask, random_tokens


def patterns_under(model, tokens, mask=None, attention_mask=None):
    names = lambda n: n.endswith("attn.hook_pattern")  # noqa: E731
    if mask is None:
        logits, cache = model.run_with_cache(tokens, attention_mask=attention_mask, names_filter=names)
    else:
        with query_gate(model, mask):
            logits, cache = model.run_with_cache(tokens, attention_mask=attention_mask, names_filter=names)
    return logits, [cache[f"blocks.{l}.attn.hook_pattern"] for l in range(model.cfg.n_layers)]


def uniform_reference(attention_mask, pos):
    """Row q of a masked head: equal weight on keys k <= q that are not padding."""
    causal = torch.tril(torch.ones(pos, pos))
    allowed = causal[None] * attention_mask[:, None, :].float()
    allowed[allowed.sum(-1) == 0] = causal.expand_as(allowed)[allowed.sum(-1) == 0]  # all-padding rows
    return allowed / allowed.sum(-1, keepdim=True)


@pytest.mark.parametrize("padded", [False, True])
def test_masked_heads_attend_uniformly_and_kept_heads_are_unchanged(any_model, padded):
    tokens = random_tokens(any_model, batch=3, pos=7)
    attention_mask = torch.ones_like(tokens)
    if padded:  # right padding on two rows
        attention_mask[1, 5:] = 0
        attention_mask[2, 3:] = 0
    mask = random_mask(any_model, seed=7)
    base_logits, base = patterns_under(any_model, tokens, attention_mask=attention_mask)
    gated_logits, gated = patterns_under(any_model, tokens, mask, attention_mask=attention_mask)
    reference = uniform_reference(attention_mask, tokens.shape[1])
    real = attention_mask.bool()
    for layer in range(any_model.cfg.n_layers):
        for head in range(any_model.cfg.n_heads):
            got = gated[layer][:, head]
            if mask[layer, head] == 0:
                # Compare at real (non-padding) query positions, where the model's answer is used.
                assert torch.allclose(got[real], reference[real], atol=1e-6)
            else:
                before_layer_changed = layer > 0 and (mask[:layer] == 0).any()
                if not before_layer_changed:
                    assert torch.allclose(got, base[layer][:, head], atol=1e-6)
    assert (gated_logits - base_logits)[real].abs().max() > 1e-4


def test_kept_heads_in_first_layer_are_identical(llama):
    tokens = random_tokens(llama)
    mask = torch.ones(llama.cfg.n_layers, llama.cfg.n_heads)
    mask[0, 3] = 0
    _, base = patterns_under(llama, tokens)
    _, gated = patterns_under(llama, tokens, mask)
    keep = [h for h in range(llama.cfg.n_heads) if h != 3]
    assert torch.equal(gated[0][:, keep], base[0][:, keep])
    assert not torch.allclose(gated[0][:, 3], base[0][:, 3])


def test_full_mask_is_a_no_op(any_model):
    tokens = random_tokens(any_model)
    with torch.no_grad():
        original = any_model(tokens)
        with query_gate(any_model, torch.ones(any_model.cfg.n_layers, any_model.cfg.n_heads)):
            gated = any_model(tokens)
    assert torch.equal(original, gated)


def test_per_row_query_masks_equal_separate_runs(llama):
    tokens = random_tokens(llama, batch=3)
    masks = random_mask(llama, seed=8, rows=3)
    with torch.no_grad(), query_gate(llama, masks):
        batched = llama(tokens)
    for row in range(3):
        with torch.no_grad(), query_gate(llama, masks[row]):
            assert torch.allclose(batched[row], llama(tokens[row : row + 1])[0], atol=1e-5)


def test_query_gate_under_cached_generation_and_backprop(llama):
    from headsup_lens.models import encode_prompts

    ids, attention = encode_prompts(llama, ["<user> cat <assistant> ", "<user> a <assistant> "])
    mask = random_mask(llama, seed=9)
    with query_gate(llama, mask):
        cached = llama.generate(ids, attention_mask=attention, max_new_tokens=5, do_sample=False, verbose=False)
        plain = llama.generate(
            ids, attention_mask=attention, max_new_tokens=5, do_sample=False, verbose=False, use_past_kv_cache=False
        )
    assert torch.equal(cached, plain)
    trainable = torch.ones(llama.cfg.n_layers, llama.cfg.n_heads, requires_grad=True)
    with query_gate(llama, trainable):
        llama(random_tokens(llama)).logsumexp(-1).mean().backward()
    assert trainable.grad.abs().sum() > 0


def test_verification_refuses_an_edit_that_does_not_reach_the_logits(llama):
    setattr(llama, _VERIFIED_ATTR, False)
    # Simulate an architecture whose layer-0 attention output ignores the pattern.
    silence = [("blocks.0.attn.hook_z", lambda z, hook: torch.zeros_like(z))]
    with llama.hooks(fwd_hooks=silence), pytest.raises(ValueError, match="does not reach the logits"):
        verify_query_gate(llama)
    setattr(llama, _VERIFIED_ATTR, False)
    # Simulate attention computed from other scores than the hook's output.
    fixed = [("blocks.1.attn.hook_pattern", lambda p, hook: torch.eye(p.shape[-1]).expand_as(p).clone())]
    with llama.hooks(fwd_hooks=fixed), pytest.raises(ValueError, match="uniform causal"):
        verify_query_gate(llama)
    setattr(llama, _VERIFIED_ATTR, False)
    verify_query_gate(llama)  # the real model passes
    assert getattr(llama, _VERIFIED_ATTR)
