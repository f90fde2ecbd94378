import pytest
import torch

from headsup_lens import HeadMask, layer_similarity, logit_lens, removal_sweep, value_gate
from headsup_lens.analysis import Setting, layer_states, random_order, sweep_similarity
from headsup_lens.models import encode, prompt_format

from ..conftest import random_mask


def prompt_tensor(model, prompt):
    template = prompt_format(model)
    return torch.tensor([encode(model, template.format(prompt), add_bos=template.add_bos)])


def test_logit_lens_last_layer_is_the_models_prediction(any_model):
    lens = logit_lens(any_model, "cat dog", k=4)
    with torch.no_grad():
        expected = any_model(prompt_tensor(any_model, "cat dog"))[0, -1].softmax(-1)
    last = any_model.cfg.n_layers - 1
    assert torch.allclose(lens.probs["resid"][last], expected, atol=1e-6)
    rows = lens.table[(lens.table.stream == "resid") & (lens.table.layer == last)]
    assert rows.token_id.tolist() == expected.topk(4).indices.tolist()
    assert rows.prob.to_numpy() == pytest.approx(expected.topk(4).values.numpy(), abs=1e-6)
    assert set(lens.table.stream) == {"resid", "attn"} and len(lens.table) == 2 * any_model.cfg.n_layers * 4


def test_logit_lens_applies_the_final_norm_to_every_layer_and_follows_the_gate(llama):
    mask = random_mask(llama, seed=1)
    lens = logit_lens(llama, "cat", k=3, mask=mask)
    with value_gate(llama, mask):
        _, cache = llama.run_with_cache(prompt_tensor(llama, "cat"))
        expected = llama(prompt_tensor(llama, "cat"))[0, -1].softmax(-1)
    for layer, hook in [(0, "hook_resid_post"), (1, "hook_attn_out")]:
        x = cache[f"blocks.{layer}.{hook}"][0, -1]
        # RMSNorm by hand, then the unembedding matrix.
        normed = x / x.pow(2).mean().add(llama.cfg.eps).sqrt() * llama.original_model.model.norm.weight
        probs = llama.original_model.lm_head(normed).softmax(-1)
        stream = "resid" if hook == "hook_resid_post" else "attn"
        assert torch.allclose(lens.probs[stream][layer], probs, atol=1e-5)
    assert torch.allclose(lens.probs["resid"][-1], expected, atol=1e-6)
    assert not torch.allclose(lens.probs["resid"][-1], logit_lens(llama, "cat", k=3).probs["resid"][-1])


def test_logit_lens_without_the_norm_reads_the_raw_residual_as_the_reference(llama):
    # The reference: lm_head(hidden_states), where Hugging Face's last hidden state is already normed.
    ids = prompt_tensor(llama, "cat")
    with torch.no_grad():
        hidden = llama.original_model(ids, output_hidden_states=True).hidden_states  # 1 + n_layers
        reference = torch.stack([llama.original_model.lm_head(h[0, -1]) for h in hidden]).softmax(-1)
    lens = logit_lens(llama, "cat", k=3, streams=("embed", "resid"), final_norm=False)
    assert lens.probs["embed"].shape[0] == 1 and torch.allclose(lens.probs["embed"][0], reference[0], atol=1e-5)
    assert torch.allclose(lens.probs["resid"], reference[1:], atol=1e-5)
    normed = logit_lens(llama, "cat", k=3, streams=("resid",))
    assert torch.allclose(normed.probs["resid"][-1], lens.probs["resid"][-1], atol=1e-6)
    assert not torch.allclose(normed.probs["resid"][0], lens.probs["resid"][0], atol=1e-3)
    embed = lens.table[lens.table.stream == "embed"]
    assert embed.layer.tolist() == [0, 0, 0] and embed.token_id.tolist() == reference[0].topk(3).indices.tolist()


def test_lens_comparison_lines_up_the_settings(llama):
    from headsup_lens.analysis import lens_comparison

    mask = random_mask(llama, seed=2)
    settings = {"original": Setting("cat"), "instructed": Setting("Say it: cat"), "masked": Setting("cat", mask=mask)}
    table = lens_comparison(llama, settings, k=3)
    assert table.layer.tolist() == list(range(-1, llama.cfg.n_layers))
    for name, run in settings.items():
        lens = logit_lens(llama, run.prompt, k=3, mask=run.mask, streams=("embed", "resid"))
        tops = [p.topk(3).indices.tolist() for p in torch.cat([lens.probs["embed"], lens.probs["resid"]])]
        assert table[name].tolist() == [" | ".join(llama.tokenizer.decode([t]) for t in top) for top in tops]
        settings[name] = tops
    for row in range(len(table)):
        assert table["masked top1 = instructed"][row] == (settings["masked"][row][0] == settings["instructed"][row][0])
        shared = len(set(settings["original"][row]) & set(settings["instructed"][row])) / 3
        assert table["original top-k overlap"][row] == pytest.approx(shared)
    assert "instructed top-k overlap" not in table
    with pytest.raises(ValueError, match="reference"):
        lens_comparison(llama, {"a": "cat", "b": "dog"}, reference="c")


def test_similarity_of_a_setting_with_itself_is_one(any_model):
    ones = torch.ones(any_model.cfg.n_layers, any_model.cfg.n_heads)
    mask = random_mask(any_model, seed=2)
    for setting in ["cat dog", Setting("cat dog", mask=mask), Setting("cat", mask=mask, gate="query")]:
        table = layer_similarity(any_model, setting, setting)
        assert table[["attn_out", "block_out"]].to_numpy() == pytest.approx(1.0, abs=1e-9)
    same = layer_similarity(any_model, "cat dog", Setting("cat dog", mask=HeadMask(ones)))
    assert same[["attn_out", "block_out"]].to_numpy() == pytest.approx(1.0, abs=1e-9)
    a, b = layer_states(any_model, "cat dog"), layer_states(any_model, Setting("cat dog", mask=ones))
    assert torch.equal(a.block_out, b.block_out) and torch.equal(a.attn_out, b.attn_out)
    other = layer_similarity(any_model, "cat dog", Setting("cat dog", mask=mask))
    assert (other.block_out < 1 - 1e-4).any()


def test_similarity_matches_cosine_of_cached_activations(llama):
    mask = random_mask(llama, seed=3)
    table = layer_similarity(llama, Setting("cat dog", mask=mask), Setting("dog", position=-2))
    with value_gate(llama, mask):
        _, a = llama.run_with_cache(prompt_tensor(llama, "cat dog"))
    _, b = llama.run_with_cache(prompt_tensor(llama, "dog"))
    for layer in range(2):
        for hook, column in [("hook_attn_out", "attn_out"), ("hook_resid_post", "block_out")]:
            x, y = a[f"blocks.{layer}.{hook}"][0, -1], b[f"blocks.{layer}.{hook}"][0, -2]
            assert table[column][layer] == pytest.approx(torch.cosine_similarity(x, y, dim=0).item(), abs=1e-5)


def test_sweep_similarity_starts_at_the_unmasked_run(llama):
    sweep = removal_sweep(llama, "cat", random_order(llama), max_new_tokens=1, record_layers=True)
    table = sweep_similarity(sweep, layer_states(llama, "cat"))
    assert len(table) == 17 * 2
    first = table[table.step == 0]
    assert first[["attn_out", "block_out"]].to_numpy() == pytest.approx(1.0, abs=1e-6)
    assert (table[table.step == 16].block_out < 0.999).all()
    with pytest.raises(ValueError, match="record_layers"):
        sweep_similarity(removal_sweep(llama, "cat", [(0, 0)], max_new_tokens=1), layer_states(llama, "cat"))


def test_bad_inputs(llama):
    with pytest.raises(ValueError, match="position"):
        layer_states(llama, Setting("cat", position=100))
    with pytest.raises((TypeError, ValueError)):  # TypeError under run-time type checking
        layer_states(llama, Setting("cat", mask=random_mask(llama), gate="key"))
    with pytest.raises(ValueError, match="streams"):
        logit_lens(llama, "cat", streams=("mlp",))


def test_a_gate_or_alpha_without_a_mask_is_refused_not_run_ungated(llama):
    with pytest.raises(ValueError, match="the query gate takes alpha=0"):  # LensConfig, before any mask
        logit_lens(llama, "cat", gate="query", alpha=0.5)
    with pytest.raises(ValueError, match="gate='query' without a mask"):
        logit_lens(llama, "cat", gate="query")
    with pytest.raises(ValueError, match="alpha=0.25 without a mask"):
        logit_lens(llama, "cat", alpha=0.25)
    with pytest.raises(ValueError, match="Setting gate='query' without a mask"):
        layer_states(llama, Setting("cat", gate="query"))
    with pytest.raises(ValueError, match="Setting alpha=0.5 without a mask"):
        layer_similarity(llama, Setting("cat", alpha=0.5), "cat")
