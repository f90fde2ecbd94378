"""The gates rely on TransformerLens 4's legacy hook names; pin them, and fail clearly without them."""

from __future__ import annotations

import pytest

from headsup_lens.gates import _masks, value_gate


def test_legacy_aliases_the_gates_use_exist(any_model):
    hooks = any_model.hook_dict
    for layer in range(any_model.cfg.n_layers):
        # hook_z is the alias of the heads' outputs before W_O: the value gate acts there.
        assert hooks[f"blocks.{layer}.attn.hook_z"].name == f"blocks.{layer}.attn.o.hook_in"
        assert f"blocks.{layer}.attn.hook_attn_scores" in hooks and f"blocks.{layer}.attn.hook_pattern" in hooks


def test_a_missing_alias_is_a_clear_error(llama, monkeypatch):
    import torch

    monkeypatch.setattr(_masks, "GATE_HOOKS", ("attn.hook_gone",))
    monkeypatch.setattr(_masks, "_HOOKS_FOUND", __import__("weakref").WeakSet())
    with (
        pytest.raises(ValueError, match=r"no hook point 'blocks.0.attn.hook_gone'.*transformer-lens>=4.3"),
        value_gate(llama, torch.ones(llama.cfg.n_layers, llama.cfg.n_heads)),
    ):
        pass
