"""The paper's reference layout of a mask, read and written (the paper's code and follow-up work
such as AHAMask).

A safetensors file holding one flat tensor named `tensor` of `n_layers * (n_heads + 1)` logits; layer L
owns the slice `[L * (n_heads + 1), (L + 1) * (n_heads + 1))`, whose last entry is an FFN slot (unused by
the reference: its MLP gate multiplies by 1). The reference keeps a head where `sigmoid(logit) > 0.5`
(its evaluation uses `>= 0.5`; the two differ only at a logit of exactly 0). Hugging Face Trainer writes
one `checkpoint-N/model.safetensors` per save: read as a series, they are the Fig. 3 weight trajectory
(`read_reference_checkpoints` -> `weight_trajectories`).

Reading is strict (`.._formats`): integer tensors, NaN or infinite logits and a grid that is not the
model's are a `FileFormatError` naming the file and what was expected. Nothing is guessed or truncated.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._formats import FileFormatError
from .._validate import check_choice, check_float, check_out_file
from ._files import read_safetensors, write_safetensors
from ._head_mask import HeadMask, _fingerprint_of, shape_of

REFERENCE_KEY = "tensor"
REFERENCE_FILE = "model.safetensors"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# Logit written for a binary value that has no trained logit: sigmoid(+-10) is 1 - 4.5e-5 / 4.5e-5.
_BINARY_LOGIT = 10.0

FFN_SLOTS = ("drop", "mlp")  # what to do with the reference's per-layer FFN logit


def _reference_file(path: Path) -> Path:
    if path.is_dir():
        candidate = path / REFERENCE_FILE
        if not candidate.is_file():
            found = sorted(p.name for p in path.glob("*.safetensors"))
            hint = f" (it has {', '.join(found)})" if found else ""
            raise ValueError(f"reference checkpoint folder {str(path)!r} has no {REFERENCE_FILE}{hint}")
        return candidate
    return path


def reference_logits(
    path: str | os.PathLike, model_or_shape: Any
) -> tuple[Float[Tensor, "n_layers n_heads"], Float[Tensor, " n_layers"]]:
    """The head logits `[n_layers, n_heads]` and FFN-slot logits `[n_layers]` of a reference-layout
    file (or a `checkpoint-N/` folder holding `model.safetensors`).

    The file's tensor is the flat `[n_layers * (n_heads + 1)]` vector the reference writes, or that
    grid itself, `[n_layers, n_heads + 1]`; another shape (a grid of another model flattened onto
    this one included) is a `FileFormatError`, as are integer tensors and NaN or infinite logits (a
    NaN FFN logit would otherwise read as "remove this MLP")."""
    n_layers, n_heads = shape_of(model_or_shape)
    file = _reference_file(Path(path))
    tensors, _ = read_safetensors(file, "reference mask file")

    def refused(problem: str, where: str = f"tensor {REFERENCE_KEY!r}") -> FileFormatError:
        return FileFormatError("reference mask file", file, where, problem)

    if REFERENCE_KEY not in tensors:
        raise refused(
            f"is not a reference-layout mask: it has no tensor named {REFERENCE_KEY!r} (it has {sorted(tensors)})", ""
        )
    tensor = tensors[REFERENCE_KEY].detach()
    if not tensor.is_floating_point():
        raise refused(f"expected floating-point logits, got a {tensor.dtype} tensor")
    expected = n_layers * (n_heads + 1)
    grid = (n_layers, n_heads + 1)
    if tensor.ndim == 2 and tuple(tensor.shape) != grid:
        raise refused(
            f"has shape {list(tensor.shape)}; a {n_layers} x {n_heads} model needs "
            f"[n_layers, n_heads + 1] = {list(grid)} (one FFN slot per layer), or the flat [{expected}]"
        )
    if tensor.ndim not in (1, 2):
        raise refused(f"has {tensor.ndim} dimensions; expected a flat vector or a grid")
    if tensor.numel() != expected:
        raise refused(
            f"holds {tensor.numel()} logits; a {n_layers} x {n_heads} model needs "
            f"n_layers * (n_heads + 1) = {expected} (one FFN slot per layer)"
        )
    logits = tensor.float().reshape(grid)
    bad = (~torch.isfinite(logits)).nonzero().tolist()
    if bad:
        layer, slot = bad[0]
        place = "its FFN slot" if slot == n_heads else f"head {slot}"
        raise refused(
            f"{len(bad)} logit(s) are NaN or infinite, the first at layer {layer}, {place} "
            f"({logits[layer, slot].item()}); a mask needs finite logits"
        )
    return logits[:, :-1].clone(), logits[:, -1].clone()


def read_reference(path: str | os.PathLike, model_or_shape: Any, *, ffn: str = "drop") -> HeadMask:
    """A reference-layout mask as a `HeadMask` (the heads the reference keeps: `sigmoid(logit) >= 0.5`).

    `model_or_shape` (a model, `ModelFingerprint` or `(n_layers, n_heads)`) gives the layout. The
    FFN slot is dropped (`ffn="drop"`, the reference never uses it) or kept as the MLP mask
    (`ffn="mlp"`: `mlp_values` = 1 where its sigmoid is >= 0.5). Its raw logits are kept in
    `metadata["ffn_logits"]` either way.
    """
    check_choice("ffn", ffn, FFN_SLOTS)
    logits, ffn_logits = reference_logits(path, model_or_shape)
    fp = _fingerprint_of(model_or_shape)
    mask = HeadMask.from_logits(logits, fp, source="reference", ffn_logits=ffn_logits.tolist())
    if ffn == "mlp":
        mask.mlp_values = (ffn_logits >= 0).float()
    return mask


def write_reference(mask: HeadMask, path: str | os.PathLike, *, ffn_logit: float = 4.0) -> Path:
    """Write `mask` in the reference layout: `path` is a `.safetensors` file, or a folder that gets
    `model.safetensors` (a `checkpoint-N/` folder the reference's notebooks can read).

    The head logits are the mask's trained logits; a mask without logits writes +-10 for kept and
    removed heads (a fractional value v writes logit(v)). The FFN slot gets the MLP mask when the
    mask has one (+-10), else `ffn_logit` (the reference's initial value 4: never used by it).
    """
    ffn_logit = check_float("ffn_logit", ffn_logit)  # a NaN slot would read back as "remove this MLP"
    target = Path(path)
    if target.suffix != ".safetensors":
        target = target / REFERENCE_FILE
    target = check_out_file(target, "path")
    if mask.logits is not None:
        logits = mask.logits
    else:
        logits = torch.logit(mask.values.clamp(0, 1), eps=None).clamp(-_BINARY_LOGIT, _BINARY_LOGIT)
    if mask.mlp_values is not None:
        ffn = torch.where(mask.mlp_values > 0, _BINARY_LOGIT, -_BINARY_LOGIT)
    else:
        ffn = torch.full((mask.n_layers,), float(ffn_logit))
    flat = torch.cat([logits.float(), ffn.float()[:, None]], dim=1).flatten().contiguous()
    return write_safetensors(target, {REFERENCE_KEY: flat}, {"format": "pt"})


def read_reference_checkpoints(folder: str | os.PathLike, model_or_shape: Any, *, ffn: str = "drop") -> list[HeadMask]:
    """Every `checkpoint-N/` under `folder` (a Hugging Face Trainer output), in step order, as masks
    with their logits and `metadata["step"] = N`: pass the list to `analysis.weight_trajectories`
    for the Fig. 3 head-weight trajectories."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"no folder at {str(root)!r}")
    found = sorted((int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name)))
    if not found:
        raise ValueError(f"{str(root)!r} has no checkpoint-N/ folders")
    for (step, path), (next_step, other) in itertools.pairwise(found):
        if step == next_step:  # checkpoint-100 and checkpoint-0100: one step, two points
            raise FileFormatError(
                "reference checkpoint folder",
                root,
                f"step {step}",
                f"{path.name}/ and {other.name}/ are both step {step}; a trajectory has one point per step",
            )
    masks = []
    for step, path in found:
        mask = read_reference(path, model_or_shape, ffn=ffn)
        mask.metadata["step"] = step
        masks.append(mask)
    return masks
