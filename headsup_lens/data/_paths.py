"""Where the paper's datasets live: explicit argument > `HEADSUP_DATA_DIR` > the per-user cache
(`$HEADSUP_CACHE_DIR/data`, else the platform's cache folder)."""

from __future__ import annotations

import os
from pathlib import Path

from .._cache import cache_root

ENV_VAR = "HEADSUP_DATA_DIR"


def default_data_dir() -> Path:
    """The folder `headsup download-data` fills by default: `data/` in the per-user cache
    (`$HEADSUP_CACHE_DIR`, else the platform's cache folder)."""
    return cache_root() / "data"


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The data directory to read tasks from; raises ValueError (saying how to get it) when missing."""
    if explicit is not None:
        path, source = Path(explicit).expanduser(), "the data_dir argument"
    elif os.environ.get(ENV_VAR):
        path, source = Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"
    else:
        path, source = default_data_dir(), "the default cache folder"
    if not path.is_dir():
        raise ValueError(
            f"data directory {path} (from {source}) does not exist. Fetch the datasets with "
            f"`headsup download-data --out {path}`, or point {ENV_VAR} (or data_dir=...) at a "
            "folder that holds function_vectors/, xnli/ and iwslt2017/"
        )
    return path
