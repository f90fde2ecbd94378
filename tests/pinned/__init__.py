"""Pinned results: outputs of the library stored beside the tests, so that a change that moves code
around can be shown to change no result.

A test compares what the code computes now with the stored file. To store a new pin after a change
that is *meant* to change a result, rerun the test with `HEADSUP_UPDATE_PINNED=1` and commit the
changed files with the reason in the commit message.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import load_file, save_file

PINNED = Path(__file__).resolve().parent
UPDATE = os.environ.get("HEADSUP_UPDATE_PINNED") == "1"
RTOL = ATOL = 1e-5
"""Tolerance of float columns: the fused attention kernel orders float operations differently."""


def assert_pinned_frame(name: str, frame: pd.DataFrame) -> None:
    """`frame` equals the stored `<name>.csv`: every non-float column (ranks, accuracies, counts, texts,
    masks) exactly, float columns to `RTOL`/`ATOL`, both after a CSV round trip."""
    path = PINNED / f"{name}.csv"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
    stored = pd.read_csv(path, keep_default_na=False, na_values=[""])
    # The same round trip for the fresh frame: what is compared is what a CSV holds.
    now = pd.read_csv(io.StringIO(frame.to_csv(index=False)), keep_default_na=False, na_values=[""])
    assert list(now.columns) == list(stored.columns), f"{name}: columns differ"
    floats = [c for c in stored.columns if pd.api.types.is_float_dtype(stored[c])]
    exact = [c for c in stored.columns if c not in floats]
    pd.testing.assert_frame_equal(now[exact], stored[exact], check_exact=True, obj=f"{name} (non-float columns)")
    pd.testing.assert_frame_equal(
        now[floats], stored[floats], check_exact=False, rtol=RTOL, atol=ATOL, obj=f"{name} (float columns)"
    )


def assert_pinned_tensors(name: str, tensors: dict[str, torch.Tensor]) -> None:
    """Every tensor equals the stored one in `<name>.safetensors`, bit for bit."""
    path = PINNED / f"{name}.safetensors"
    tensors = {key: value.detach().cpu().contiguous() for key, value in tensors.items()}
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, path)
    stored = load_file(path)
    assert sorted(stored) == sorted(tensors)
    for key, value in tensors.items():
        assert torch.equal(value, stored[key]), f"{name}: {key} differs from the pinned tensor"
