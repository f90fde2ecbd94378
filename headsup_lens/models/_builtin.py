"""Built-in model names, resolved to folders shipped inside the package (no download)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from .._typecheck import checked

# Built-in model name -> (package, folder inside it).
BUILTIN_MODELS = {"organism": ("headsup_lens.organism", "weights")}


@checked
def builtin_model_dir(name: str) -> Path | None:
    """The shipped directory of a built-in model name (e.g. "organism"), or None."""
    if name not in BUILTIN_MODELS:
        return None
    package, sub = BUILTIN_MODELS[name]
    return Path(str(files(package) / sub))
