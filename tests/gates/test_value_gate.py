import pytest
import torch
from transformers import AutoModelForCausalLM

from headsup_lens import HeadMask, value_gate
from headsup_lens.models import encode_prompts

from ..conftest import random_mask, random_tokens


def hf_reference_logits(model_dir, tokens, mask):
    """Gate the input of each layer's output projection in the plain Hugging Face model."""
    hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    cfg = hf.config
    n_heads = cfg.num_attention_heads if hasattr(cfg, "num_attention_heads") else cfg.n_head
    handles = []
    if hasattr(hf, "model"):  # Llama-style
        projections = [layer.self_attn.o_proj for layer in hf.model.layers]
    else:  # GPT-2 style
        projections = [block.attn.c_proj for block in hf.transformer.h]
    for layer, projection in enumerate(projections):

        def gate(module, args, layer=layer):
            (x,) = args
            per_head = x.view(*x.shape[:-1], n_heads, -1) * mask[layer][:, None]
            return (per_head.view(x.shape),)

        handles.append(projection.register_forward_pre_hook(gate))
    with torch.no_grad():
        logits = hf(tokens).logits
    for handle in handles:
        handle.remove()
    return logits


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_value_gate_equals_gating_o_proj_input(name, request):
    model, model_dir = request.getfixturevalue(name), request.getfixturevalue(f"{name}_dir")
    tokens = random_tokens(model)
    mask = random_mask(model, seed=1)
    with torch.no_grad(), value_gate(model, mask):
        gated = model(tokens)
    reference = hf_reference_logits(model_dir, tokens, mask)
    assert (gated - reference).abs().max().item() <= 1e-5
    with torch.no_grad():
        assert (model(tokens) - gated).abs().max().item() > 1e-3  # the gate did something


def test_all_ones_and_alpha_one_leave_logits_unchanged(any_model):
    tokens = random_tokens(any_model)
    with torch.no_grad():
        original = any_model(tokens)
        with value_gate(any_model, torch.ones(any_model.cfg.n_layers, any_model.cfg.n_heads)):
            ones = any_model(tokens)
        with value_gate(any_model, torch.zeros(any_model.cfg.n_layers, any_model.cfg.n_heads), alpha=1.0):
            alpha_one = any_model(tokens)
    assert torch.equal(original, ones)
    assert torch.allclose(original, alpha_one, atol=1e-6)


def test_all_zeros_removes_every_head(any_model):
    tokens = random_tokens(any_model)
    _, cache = any_model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_attn_out"))
    with value_gate(any_model, HeadMask(torch.zeros(any_model.cfg.n_layers, any_model.cfg.n_heads))):
        _, gated = any_model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_attn_out"))
    for layer in range(any_model.cfg.n_layers):
        out = gated[f"blocks.{layer}.hook_attn_out"]
        # Only the output bias (if any) remains, the same at every position.
        assert torch.allclose(out, out[:, :1].expand_as(out), atol=1e-6)
        assert not torch.allclose(out, cache[f"blocks.{layer}.hook_attn_out"], atol=1e-4)


def test_alpha_scales_heads_outside_the_mask(llama, llama_dir):
    tokens = random_tokens(llama)
    mask = random_mask(llama, seed=2)
    with torch.no_grad(), value_gate(llama, mask, alpha=0.25):
        gated = llama(tokens)
    reference = hf_reference_logits(llama_dir, tokens, mask + 0.25 * (1 - mask))
    assert (gated - reference).abs().max().item() <= 1e-5


def test_per_row_masks_equal_separate_runs(any_model):
    tokens = random_tokens(any_model, batch=4)
    masks = random_mask(any_model, seed=3, rows=4)
    with torch.no_grad(), value_gate(any_model, masks):
        batched = any_model(tokens)
    for row in range(4):
        with torch.no_grad(), value_gate(any_model, masks[row]):
            single = any_model(tokens[row : row + 1])
        assert torch.allclose(batched[row], single[0], atol=1e-5)


def test_per_row_masks_under_cached_generation(llama):
    prompts = ["<user> cat <assistant> ", "<user> dog <assistant> ", "<user> a <assistant> "]
    ids, attention = encode_prompts(llama, prompts)
    masks = random_mask(llama, seed=4, rows=3)
    with value_gate(llama, masks):
        batched = llama.generate(
            ids, attention_mask=attention, max_new_tokens=6, do_sample=False, verbose=False, return_type="tokens"
        )
    for row, prompt in enumerate(prompts):
        single_ids, _ = encode_prompts(llama, [prompt])
        with value_gate(llama, masks[row]):
            single = llama.generate(single_ids, max_new_tokens=6, do_sample=False, verbose=False, return_type="tokens")
            uncached = llama.generate(
                single_ids,
                max_new_tokens=6,
                do_sample=False,
                verbose=False,
                return_type="tokens",
                use_past_kv_cache=False,
            )
        assert batched[row, -6:].tolist() == single[0, -6:].tolist() == uncached[0, -6:].tolist()


def test_gradients_reach_the_mask(any_model):
    tokens = random_tokens(any_model)
    mask = torch.ones(any_model.cfg.n_layers, any_model.cfg.n_heads, requires_grad=True)
    with value_gate(any_model, mask):
        loss = any_model(tokens).logsumexp(-1).mean()
    loss.backward()
    assert mask.grad is not None and mask.grad.abs().sum() > 0


def test_hooks_are_removed_after_exit_exception_and_nesting(llama):
    tokens = random_tokens(llama)
    with torch.no_grad():
        original = llama(tokens)
    zeros = torch.zeros(llama.cfg.n_layers, llama.cfg.n_heads)
    with pytest.raises(RuntimeError, match="boom"), value_gate(llama, zeros):
        raise RuntimeError("boom")
    with value_gate(llama, random_mask(llama, seed=5)):
        with value_gate(llama, zeros):
            pass
        with torch.no_grad():
            inner_gone = llama(tokens)
    with value_gate(llama, random_mask(llama, seed=5)), torch.no_grad():
        outer_only = llama(tokens)
    with torch.no_grad():
        after = llama(tokens)
    assert torch.equal(inner_gone, outer_only)
    assert torch.equal(after, original)
    assert all(not hp.fwd_hooks for hp in llama.hook_dict.values())


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.ones(3, 8), "does not fit"),
        (torch.ones(2, 2, 3, 8), "does not fit"),
        (torch.full((2, 8), float("nan")), "NaN"),
    ],
)
def test_bad_masks_raise_clear_errors(llama, bad, message):
    with pytest.raises(ValueError, match=message), value_gate(llama, bad):
        pass


def test_a_mask_that_is_not_a_tensor_is_refused(llama):
    with pytest.raises((TypeError, ValueError)), value_gate(llama, "all"):  # TypeError under run-time shapes
        pass


def test_per_row_mask_with_wrong_batch_raises(llama):
    with pytest.raises(ValueError, match="mask has 2 rows"), value_gate(llama, random_mask(llama, rows=2)):
        llama(random_tokens(llama, batch=3))


def test_alpha_out_of_range(llama):
    with pytest.raises(ValueError, match="alpha"), value_gate(llama, random_mask(llama), alpha=1.5):
        pass


def test_mask_of_another_model_is_refused(llama, gpt2):
    with pytest.raises(ValueError, match="does not fit"), value_gate(llama, HeadMask.full(gpt2)):
        pass


def test_reset_hooks_inside_a_gate_is_refused_and_works_after(llama):
    """`model.reset_hooks()` inside a gate would silently drop the gate: it raises there (value
    gate, query gate, nested gates) and the gate keeps acting; after the block it works again."""
    from headsup_lens import query_gate

    tokens = random_tokens(llama, batch=1, pos=6)
    mask = random_mask(llama, seed=1)
    with torch.no_grad():
        plain = llama(tokens)
        with value_gate(llama, mask):
            gated = llama(tokens)
            with pytest.raises(RuntimeError, match="reset_hooks"):
                llama.reset_hooks()
            with value_gate(llama, HeadMask.full(llama)), pytest.raises(RuntimeError, match="reset_hooks"):
                llama.reset_hooks()
            with pytest.raises(RuntimeError, match="reset_hooks"):  # the inner gate left the guard in place
                llama.reset_hooks()
            assert torch.equal(llama(tokens), gated)  # still gated
        with query_gate(llama, mask), pytest.raises(RuntimeError, match="reset_hooks"):
            llama.reset_hooks()
    assert "reset_hooks" not in vars(llama)
    llama.reset_hooks()  # outside any gate: the model's own method
    assert not torch.equal(plain, gated)
    with torch.no_grad():
        assert torch.equal(llama(tokens), plain)
