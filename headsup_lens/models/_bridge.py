"""How the bridge wraps the Hugging Face model: each wrapped module sits under its component as
`original_component`, and the model's own parameter names carry a `._original_component` segment per
component."""

from __future__ import annotations

from typing import Any

BRIDGE_SEGMENT = "._original_component"


def raw_module(module: Any) -> Any:
    """The Hugging Face module under a bridge component."""
    while getattr(module, "original_component", None) is not None:
        module = module.original_component
    return module


def plain_name(name: str) -> str:
    """A parameter's name in the bridged model as the Hugging Face model (and its checkpoint) names it."""
    return name.replace(BRIDGE_SEGMENT, "")
