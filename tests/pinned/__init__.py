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


def assert_pinned_mask_logits(name: str, logits: dict[str, torch.Tensor], atol: float, store: bool = True) -> None:
    """Every mask's logits equal the stored ones in `<name>.safetensors` to `atol`, and every head whose
    stored logit lies farther than `atol` from zero is kept (logit > 0) or removed exactly as stored.

    Not bit for bit: a few hundred optimisation steps carry the last bits of another CPU's kernels (or
    another thread count) into the logits, and a step of the straight-through threshold can amplify them.
    A head within `atol` of zero may go either way. `store=False`: never stores (`logits` come from
    another computation than the pinned one)."""
    path = PINNED / f"{name}.safetensors"
    logits = {key: value.detach().cpu().contiguous() for key, value in logits.items()}
    if UPDATE and store:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(logits, path)
    stored = load_file(path)
    assert sorted(stored) == sorted(logits), f"{name}: other masks than the pinned ones"
    for key, value in logits.items():
        pinned = stored[key]
        assert value.shape == pinned.shape and value.dtype == pinned.dtype, f"{name}: {key} has another shape or dtype"
        clear = pinned.abs() > atol  # heads whose side of the threshold is pinned
        flipped = ((value > 0) != (pinned > 0)) & clear
        assert not flipped.any(), f"{name}: {key} keeps other heads than pinned at {flipped.nonzero().tolist()}"
        difference = (value - pinned).abs().max().item()
        assert difference <= atol, f"{name}: {key} differs from the pinned logits by {difference:.3g} > {atol}"
