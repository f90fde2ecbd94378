"""Run identities: what determines a run's result, recorded in its folder and compared field by field
before the folder is resumed. One helper for every resumable run: mask training and fine-tuning
(`state.pt`, `run.json`), evaluation (`evaluation.partial.json`) and the experiment runner's model
record (`model.json`). A model is identified by content (its fingerprint's structure and weights hash),
never by its name or path."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from transformer_lens.model_bridge import TransformerBridge

from .._distributed import gather
from .._version import __version__
from ._fingerprint import ModelFingerprint, fingerprint
from ._templates import prompt_format

# Fields recorded as content hashes: a difference is named, not shown.
HASHED = {"data": "training data (its content hash)", "mask": "mask", "other_mask": "other_mask"}


def data_hash(rows: Any) -> str:
    """A hash of a run's encoded data (its `repr`: data, instructions, prompt format and tokenizer together)."""
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def run_identity(model: TransformerBridge, **fields: Any) -> dict:
    """`fields` (what the caller's result depends on: its recipe or options, tasks, a hash of its data,
    ...) with the model's fingerprint, its prompt format and the library version."""
    return {
        "model": fingerprint(model).to_dict(),
        "prompt_format": prompt_format(model).name,
        **fields,
        "version": __version__,
    }


def model_identity(value: Any) -> tuple | None:
    """`(architecture, n_layers, n_heads, d_head, d_vocab, weights hash)` of a recorded model: a
    fingerprint's dict or the list older run folders record; None when it is neither. Two records name
    the same model when their structure agrees and so do their hashes, where both have one."""
    try:
        if isinstance(value, dict):
            recorded = ModelFingerprint.from_dict(value)
            return (*recorded.structural(), recorded.content_hash)
    except (TypeError, ValueError):
        return None
    if isinstance(value, (list, tuple)) and len(value) == 6:
        return tuple(value)
    return None


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        try:
            return ModelFingerprint.from_dict(value).describe()
        except (TypeError, ValueError):
            pass
    return repr(value)


def identity_differences(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    nested: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """The fields in which two run identities differ, readable: `lr (0.1 there, 0.05 here)`, `training
    data (its content hash)`, `model (... there, ... here)`; empty when they are the same run. A field
    named in `nested` holds a dict compared key by key, each key prefixed with `nested[field]`; `labels`
    renames the hashed fields in messages."""
    nested = {"recipe": "recipe."} if nested is None else nested
    hashed = {**HASHED, **(labels or {})}
    differences = []
    for key in [*current, *(k for k in saved if k not in current)]:  # the model first: it explains the rest
        there, here = saved.get(key), current.get(key)
        if there == here:
            continue
        if key in nested and isinstance(there, dict) and isinstance(here, dict):
            differences += [
                f"{nested[key]}{k} ({there.get(k)!r} there, {here.get(k)!r} here)"
                for k in sorted(set(there) | set(here))
                if there.get(k) != here.get(k)
            ]
        elif key == "model":
            before, now = model_identity(there), model_identity(here)
            if before is None:
                differences.append("model (unreadable there)")
            elif now is None or before[:5] != now[:5] or (None not in (before[5], now[5]) and before[5] != now[5]):
                differences.append(f"model ({_describe(there)} there, {_describe(here)} here)")
        else:
            differences.append(hashed.get(key, f"{key} ({there!r} there, {here!r} here)"))
    return differences


def check_same_run(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    folder: str | os.PathLike,
    *,
    what: str = "training run",
    fresh: str = "resume=False; CLI: --fresh",
) -> None:
    """A ValueError naming every difference when the run saved in `folder` (identity `saved`) is
    not this run (`current`); `what` names the kind of run, `fresh` how to start afresh."""
    differences = identity_differences(saved, current)
    if differences:
        raise ValueError(
            f"{folder} holds a {what} that differs from this one in {', '.join(differences)}; "
            f"resume only the same run, or start afresh ({fresh}) or in another folder"
        )


def check_ranks_agree(identity: Mapping[str, Any], what: str = "training") -> None:
    """Every rank of the job must run the same `what` (its run identity: tasks and their data, recipe
    or options, masks, model fingerprint, prompt format): a collective, called by every rank before
    its first step. A ValueError on every rank names the first rank that differs from rank 0, and how."""
    identities = gather(dict(identity))
    for other, theirs in enumerate(identities[1:], 1):
        differences = identity_differences(identities[0], theirs)
        if differences:
            raise ValueError(
                f"the ranks of this job would run different {what}s: rank {other} differs from rank 0 in "
                f"{', '.join(differences)} ('there' is rank 0's, 'here' rank {other}'s); start every rank "
                "with the same tasks, options and model"
            )
