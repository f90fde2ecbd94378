"""The memory plan of FSDP and `device_map="auto"` (`memory_plan`): model shapes count what the model
classes hold, and each plan row adds up its parts as its formula says."""

from __future__ import annotations

import pytest
import torch
import transformers

from headsup_lens.models import LLAMA_3_SHAPES, MemoryLaw, ModelShape, memory_plan

LAW = MemoryLaw(activation_model=10.0, activation_mlp=2.0, workspace_answers=4.0, workspace_tokens=1.0)
GIB = 2**30


@pytest.mark.parametrize("shape", LLAMA_3_SHAPES, ids=lambda s: s.name)
def test_a_shape_counts_the_parameters_of_its_model_class(shape: ModelShape):
    config = transformers.LlamaConfig(
        num_hidden_layers=shape.n_layers,
        hidden_size=shape.d_model,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        head_dim=shape.d_head,
        intermediate_size=shape.d_mlp,
        vocab_size=shape.vocab,
        tie_word_embeddings=shape.tied,
    )
    with torch.device("meta"):  # no memory: only the shapes
        model = transformers.LlamaForCausalLM(config)
    assert shape.parameters() == sum(p.numel() for p in model.parameters())
    assert shape.layer_parameters() == sum(p.numel() for p in model.model.layers[0].parameters())


def test_each_plan_row_adds_up_its_parts():
    shape = LLAMA_3_SHAPES[1]
    tokens, answers = 240.0, 40.0
    weights = shape.parameters() * 2 / GIB
    one = memory_plan(shape, LAW, gpus=8, tokens=tokens, answers=answers)
    fsdp, placed = (next(r for r in one if r["method"] == m) for m in ("fsdp", "device_map"))
    assert fsdp["weights_gib"] * 8 == pytest.approx(weights) == placed["weights_gib"] * 8
    assert fsdp["gathered_gib"] == pytest.approx(2 * shape.largest_unit() * 2 / GIB) and placed["gathered_gib"] == 0
    per_layer = LAW.activation_model * shape.d_model + LAW.activation_mlp * shape.d_mlp
    assert fsdp["activations_gib"] == pytest.approx(tokens / 8 * shape.n_layers * per_layer / GIB)
    assert placed["activations_gib"] == pytest.approx(fsdp["activations_gib"])  # all rows, an eighth of the layers
    assert placed["workspace_gib"] == pytest.approx(
        (LAW.workspace_answers * answers * shape.vocab + LAW.workspace_tokens * tokens * shape.d_mlp) / GIB
    )
    for row in one:
        parts = row["weights_gib"] + row["gathered_gib"] + row["activations_gib"] + row["workspace_gib"]
        assert row["peak_gib"] == pytest.approx(parts)
    assert (fsdp["computing"], placed["computing"]) == (8, 1)
    two = memory_plan(shape, LAW, gpus=16, machines=2, tokens=tokens, answers=answers)
    assert [r["method"] for r in two] == ["fsdp"]  # accelerate places layers within one machine
    with pytest.raises(ValueError, match="multiple"):
        memory_plan(shape, LAW, gpus=3, machines=2, tokens=tokens, answers=answers)
