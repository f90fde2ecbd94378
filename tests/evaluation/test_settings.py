"""The settings registry and `EvalConfig`."""

from __future__ import annotations

import pytest

from headsup_lens.evaluation import (
    CONTROLS,
    MASK_SETTINGS,
    REFERENCE_SETTINGS,
    SETTINGS,
    EvalConfig,
    EvalSetting,
    register_setting,
    setting_of,
)
from headsup_lens.evaluation import _settings as settings_module


def test_the_paper_settings_in_order_with_what_each_needs():
    assert list(SETTINGS) == [
        "original",
        "instructed",
        "masked",
        "random mask",
        "other model's mask",
        "instructed + scaled mask",
        "echo baseline",
        "majority label",
    ]
    needs = {name: setting.needs for name, setting in SETTINGS.items()}
    assert needs == {
        "original": (),
        "instructed": ("instruction",),
        "masked": ("mask",),
        "random mask": ("mask",),
        "other model's mask": ("other mask",),
        "instructed + scaled mask": ("instruction", "value gate", "mask"),
        "echo baseline": ("generation",),
        "majority label": ("labels", "generation"),
    }
    assert MASK_SETTINGS == ("masked", "random mask", "other model's mask", "instructed + scaled mask")
    assert CONTROLS == ("echo baseline", "majority label") and REFERENCE_SETTINGS == ("original", "instructed")
    assert [s.mask for s in SETTINGS.values()][:6] == ["none", "none", "mask", "shuffled", "other", "mask"]


def test_the_registry_refuses_duplicates_and_is_read_only(monkeypatch):
    with pytest.raises(ValueError, match="'masked' is registered already"):
        register_setting(EvalSetting("masked", mask="mask"))
    with pytest.raises(TypeError):
        SETTINGS["mine"] = EvalSetting("mine")  # type: ignore[index]
    monkeypatch.setattr(settings_module, "_REGISTRY", dict(settings_module._REGISTRY))
    monkeypatch.setattr(settings_module, "SETTINGS", settings_module.MappingProxyType(settings_module._REGISTRY))
    mine = register_setting(EvalSetting("masked twice", mask="mask"))
    assert settings_module.SETTINGS["masked twice"] is mine and "masked twice" not in SETTINGS


def test_settings_are_checked_when_declared():
    with pytest.raises(ValueError, match="scaled needs a mask"):
        EvalSetting("odd", scaled=True)
    with pytest.raises(ValueError, match="a control runs no model"):
        EvalSetting("odd", instructed=True, control=lambda task, split, inputs, labels: list(inputs))
    with pytest.raises(ValueError, match="without ', '"):
        EvalSetting("masked, seed 1", mask="mask")
    with pytest.raises(TypeError, match="mask"):
        EvalSetting("odd", mask="shuffle")  # type: ignore[arg-type]


def test_labelled_variants_resolve_to_their_setting():
    assert setting_of("masked, seed 1") is SETTINGS["masked"]
    assert setting_of("random mask") is SETTINGS["random mask"]
    assert setting_of("hybrid mask") is None


def test_config_defaults_are_the_papers_and_bad_values_are_refused():
    config = EvalConfig()
    assert (config.alpha, config.gate, config.split, config.batch_size, config.random_seed) == (
        0.25,
        "value",
        "eval",
        16,
        0,
    )
    assert config.generate and config.text_metrics == "auto" and config.text_style == "paper" and config.settings == ()
    assert "settings" not in config.identity() and "progress" not in config.identity()
    with pytest.raises(ValueError, match="alpha"):
        EvalConfig(alpha=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        EvalConfig(batch_size=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        EvalConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="more than once"):
        EvalConfig(settings=("masked", "masked"))
    with pytest.raises(ValueError, match=r"gate must be one of \['value', 'query'\], got 'key'"):
        EvalConfig(gate="key")  # a gate's name is checked by the registry (gates.GATES)
    with pytest.raises(TypeError, match="settings"):
        EvalConfig(settings=["masked"])  # type: ignore[arg-type]
