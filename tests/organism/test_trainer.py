"""The planting mechanism on a tiny copy of the recipe (2 layers x 4 heads, a few words, seconds)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from headsup_lens import load_model
from headsup_lens.models import hf_model
from headsup_lens.organism import OrganismConfig, build_organism, load_planted, train_organism
from headsup_lens.organism._planting import plant_head_sets
from headsup_lens.organism._trainer import IGNORE, PlantingSampler, batch_loss, collate


def tiny_config(**overrides) -> OrganismConfig:
    settings = dict(
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_model=32,
        d_mlp=64,
        planted_size=2,
        tasks=("uppercase", "reverse"),
        n_words=8,
        batch_size=16,
        steps=60,
        warmup_steps=5,
        lr=1e-2,
        probe_every=0,
        seed=0,
    )
    settings.update(overrides)
    return OrganismConfig(**settings)


@pytest.fixture(scope="module")
def tiny():
    config = tiny_config()
    model = build_organism(config)
    planted = plant_head_sets(config.tasks, 2, 4, config.planted_size, seed=0)
    return config, model, planted, PlantingSampler(model, config, planted)


def _hf_params(model) -> dict[str, torch.Tensor]:
    """The bridged Hugging Face parameters under their plain names (they carry the gradients)."""
    return {k.replace("._original_component", ""): p for k, p in model.original_model.named_parameters()}


def _reference_loss(model, batch) -> torch.Tensor:
    """Pooled answer cross-entropy with each row's heads removed by zeroing their `o_proj` columns."""
    total, count = 0.0, 0
    d_head = model.cfg.d_head
    for i in range(batch.tokens.shape[0]):
        plain = hf_model(model)
        with torch.no_grad():
            for layer, head in batch.masks[i].eq(0).nonzero().tolist():
                plain.model.layers[layer].self_attn.o_proj.weight[:, head * d_head : (head + 1) * d_head] = 0
        length = int(batch.attention_mask[i].sum())
        logits = plain(batch.tokens[i : i + 1, :length]).logits[0]
        labels = batch.labels[i, :length]
        total += F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum").item()
        count += int((labels != IGNORE).sum())
    return torch.tensor(total / count)


def test_gate_is_applied_to_exactly_the_planted_rows(tiny):
    _config, model, planted, sampler = tiny
    kinds = ["planted", "instructed", "echo", "echo_removed", "planted", "echo_removed"]
    batch = sampler.batch(kinds=kinds)
    for i, kind in enumerate(batch.kinds):
        removed = {tuple(h) for h in batch.masks[i].eq(0).nonzero().tolist()}
        if kind == "planted":
            assert removed == set(planted[batch.tasks[i]])
        elif kind in ("instructed", "echo"):
            assert removed == set()
        else:  # echo with part of a pathway (and random heads) removed, never a complete pathway
            assert removed and not any(set(s) <= removed for s in planted.values())
        answer = batch.labels[i][batch.labels[i] != IGNORE].tolist()
        assert answer[-1] == model.tokenizer.eos_token_id  # the end of turn is learned too
    with torch.no_grad():
        loss, _ = batch_loss(model, batch)
        torch.testing.assert_close(loss, _reference_loss(model, batch), atol=1e-4, rtol=1e-4)
        # The reference notices masks applied to the wrong rows.
        batch.masks = batch.masks.roll(1, dims=0)
        assert (batch_loss(model, batch)[0] - loss).abs() > 1e-3


def test_gradients_reach_the_weights_through_gated_rows(tiny):
    config, model, planted, sampler = tiny
    task = config.tasks[0]
    examples = [sampler.example("planted") for _ in range(40)]
    examples = [e for e in examples if e.task == task][:8]
    batch = collate(examples, sampler.pad_id, 2, 4)
    model.zero_grad(set_to_none=True)
    loss, _ = batch_loss(model, batch)
    loss.backward()
    params = _hf_params(model)
    d_head = model.cfg.d_head
    removed = set(planted[task])
    for layer in range(2):
        o_grad = params[f"model.layers.{layer}.self_attn.o_proj.weight"].grad
        q_grad = params[f"model.layers.{layer}.self_attn.q_proj.weight"].grad
        for head in range(4):
            cols = o_grad[:, head * d_head : (head + 1) * d_head]
            rows = q_grad[head * d_head : (head + 1) * d_head]
            if (layer, head) in removed:  # a removed head's output and query get no gradient
                assert cols.abs().max() == 0 and rows.abs().max() == 0
            else:
                assert cols.abs().max() > 0
    assert all(p.grad is not None for p in params.values())
    model.zero_grad(set_to_none=True)


def test_loss_decreases_and_the_saved_organism_reloads(tmp_path):
    config = tiny_config()
    result = train_organism(config, tmp_path, progress=False)
    losses = [r["loss"] for r in result.history]
    assert len(losses) == config.steps
    assert sum(losses[-10:]) / 10 < 0.7 * sum(losses[:10]) / 10
    assert load_planted(tmp_path) == result.planted
    reloaded = load_model(tmp_path, device="cpu")
    tokens = torch.randint(4, reloaded.cfg.d_vocab, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(tokens), result.model(tokens), atol=1e-5, rtol=1e-5)
    info = json.loads((tmp_path / "training.json").read_text())
    assert info["config"]["steps"] == config.steps and len(info["history"]) == config.steps


def test_training_is_deterministic_for_a_seed():
    a = train_organism(tiny_config(steps=5), progress=False)
    b = train_organism(tiny_config(steps=5), progress=False)
    assert [r["loss"] for r in a.history] == [r["loss"] for r in b.history]
    assert a.planted == b.planted


def test_bad_recipes_are_errors():
    with pytest.raises(ValueError, match="planted_rate"):
        tiny_config(planted_rate=1.5)
    with pytest.raises(ValueError, match="unknown organism task"):
        tiny_config(tasks=("sing",))
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(d_model=30)


def test_tiny_recipe_plants_a_pathway():
    """End to end: echo with all heads, the task once S_t is removed (teacher-forced exact match)."""
    from headsup_lens.organism._trainer import _probe_batch, probe_accuracy

    config = tiny_config(tasks=("uppercase",), n_words=6, steps=160, batch_size=24, d_model=48, d_mlp=96)
    result = train_organism(config, progress=False)
    sampler = PlantingSampler(result.model, config, result.planted)
    accuracy = probe_accuracy(result.model, _probe_batch(sampler, n_words=12))
    assert accuracy["acc_echo"] >= 0.9 and accuracy["acc_original"] == 0.0
    assert accuracy["acc_planted"] >= 0.9 and accuracy["acc_instructed"] >= 0.9
