"""The per-user cache folder of headsup_lens: `$HEADSUP_CACHE_DIR`, else the platform's cache folder.
Converted models live in its `models/`, the paper's datasets (by default) in its `data/`."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV_VAR = "HEADSUP_CACHE_DIR"


def cache_root() -> Path:
    """`$HEADSUP_CACHE_DIR` when set, else the platform's per-user cache folder for headsup_lens."""
    root = os.environ.get(CACHE_ENV_VAR)
    if root:
        return Path(root).expanduser()

    return Path(platformdirs.user_cache_dir("headsup_lens"))
