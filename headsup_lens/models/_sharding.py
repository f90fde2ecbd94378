"""A model sharded over the ranks of a process group with FSDP2 (`torch.distributed.fsdp.fully_shard`).

Mask training and the analyses never change a weight: FSDP's easiest case. Every rank keeps `1/N`
of every weight (a DTensor shard of dim 0) and all-gathers one unit's weights just before the unit
runs, freeing them right after; the masks (a few thousand numbers) stay whole on every rank.

- Units: each decoder layer, and every other module that holds weights (the embedding, the final
  norm, the unembedding; tied weights share a unit), then the whole model. The units are the Hugging
  Face modules under the bridge's components, so a module the library calls by itself (the
  unembedding of a read-out, the final norm of the logit lens, the native forward pass that swaps
  the components out, `gates._native`) all-gathers its own weights as it runs.
- Weights are read per shard: the model is built on the meta device (no memory), sharded, given
  empty storage for its shard only, and filled by `torch.distributed.checkpoint` from the
  checkpoint's safetensors files (`HuggingFaceStorageReader`), each rank reading the slices of its
  own shard. No process ever holds a full copy; ranks on one machine read the files through one
  page cache. (The alternative, one rank loading everything and broadcasting with
  `set_model_state_dict(..., broadcast_from_rank0=True)`, holds a full copy in that rank's memory:
  140 GB of host memory at 70B in bf16.)
- Buffers the model computes when it is built (rotary frequencies) are kept from the meta build,
  which builds buffers on the CPU; a buffer the bridge adds on the meta device (the unembedding's
  zero bias where the checkpoint has none) is zeros.

Every forward pass of a sharded model is a collective: every rank must run the same passes in the
same order (`_distributed.padded_share`, `all_agree`). The weights hash (`weights_hash`) is computed
from the shards once, at load, by every rank together, and kept. The library's calls that run the
model (`every_rank`) first check that every rank is making the same call: a rank alone in a call
fails after `HEADSUP_RANK_WAIT` seconds (60 by default) with an error that says so, instead of
waiting in the first pass for the process group's timeout (30 minutes by default).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable
from contextvars import ContextVar
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from transformer_lens.model_bridge import TransformerBridge

from .._distributed import rank_and_world
from .._formats import safetensors_header
from ._bridge import plain_name, raw_module

_SHARDED = "_headsup_sharded"
_CALLS = "_headsup_calls"  # (process group, seconds): where and how long the ranks meet at each call
RANK_WAIT = "HEADSUP_RANK_WAIT"
_F = TypeVar("_F", bound=Callable[..., Any])
_inside_call: ContextVar[bool] = ContextVar("headsup_inside_call", default=False)
_HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def is_sharded(model: nn.Module) -> bool:
    """Whether `model` was loaded sharded over the ranks of a process group (`load_model(shard=...)`)."""
    return bool(getattr(model, _SHARDED, False))


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The part of `tensor` this rank holds: a DTensor's local shard, any other tensor itself."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def lockstep(model: nn.Module) -> bool:
    """Whether the forward passes of `model` are collectives over several ranks (sharded, world > 1):
    then every rank must run the same passes."""
    return is_sharded(model) and rank_and_world()[1] > 1


def rank_wait() -> float:
    """Seconds a rank waits for the others at the start of each call on a sharded model
    (`HEADSUP_RANK_WAIT`, 60 by default)."""
    text = os.environ.get(RANK_WAIT, "").strip()
    if not text:
        return 60.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{RANK_WAIT}={text!r} is not a positive number of seconds")
    return seconds


def same_call(model: nn.Module, name: str) -> None:
    """Check that every rank of a sharded model's job is entering the call `name` (a collective on
    the model's own gloo group, which gives up after `rank_wait()` seconds): a ValueError on a
    rank that waits alone, and on every rank when they enter different calls."""
    group, seconds = getattr(model, _CALLS)
    rank, world = rank_and_world()
    names: list[Any] = [None] * world
    rule = "on a sharded model every rank must make the same calls, in the same order (each pass is a collective)"
    try:
        dist.all_gather_object(names, name, group=group)
    except RuntimeError:  # gloo timed out, or another rank's process has gone
        raise ValueError(
            f"rank {rank} called {name} on a model sharded over {world} ranks, and the other ranks did not "
            f"join it within {seconds:g} s ({RANK_WAIT} sets the wait): {rule}"
        ) from None
    if len(set(names)) > 1:
        calls = ", ".join(f"rank {r} {n}" for r, n in enumerate(names))
        raise ValueError(f"the ranks of a sharded model made different calls ({calls}): {rule}")


def every_rank(fn: _F) -> _F:
    """`fn` (a call that runs the model given as its first argument) checked, on a model sharded over
    several ranks, to be made by every rank at once (`same_call`) before its first pass. Calls made
    inside it are not checked again."""

    @functools.wraps(fn)
    def call(model: Any, *args: Any, **kwargs: Any) -> Any:
        if _inside_call.get() or not (isinstance(model, nn.Module) and lockstep(model)):
            return fn(model, *args, **kwargs)
        same_call(model, fn.__name__)
        token = _inside_call.set(True)
        try:
            return fn(model, *args, **kwargs)
        finally:
            _inside_call.reset(token)

    return call  # type: ignore[return-value]


def shard_units(model: TransformerBridge) -> list[list[nn.Module]]:
    """The modules of the Hugging Face model under `model` that become FSDP units, inner ones first:
    each decoder layer, then each other module that holds weights directly (modules sharing a weight,
    tied embeddings, form one unit). The whole model comes last, outside this list."""
    hf = model.original_model
    layers = [raw_module(block) for block in model.blocks]
    inside = {id(m) for layer in layers for m in layer.modules()}
    owners: list[nn.Module] = []
    for module in hf.modules():
        if id(module) not in inside and module is not hf and any(True for _ in module.parameters(recurse=False)):
            owners.append(module)
    # Union the owners that share a parameter (tied input and output embeddings).
    groups: list[list[nn.Module]] = []
    for module in owners:
        mine = {id(p) for p in module.parameters(recurse=False)}
        joined = [g for g in groups if any(id(p) in mine for m in g for p in m.parameters(recurse=False))]
        merged = [m for g in joined for m in g] + [module]
        groups = [g for g in groups if g not in joined] + [merged]
    return [[layer] for layer in layers] + groups


def local_share(model: TransformerBridge) -> tuple[int, int]:
    """`(elements this rank holds, elements of the whole model)`, counted over the Hugging Face model's
    parameters from the DTensor shards (tied weights once)."""
    held = total = 0
    for parameter in model.original_model.parameters():
        held += local_tensor(parameter).numel()
        total += parameter.numel()
    return held, total


def checkpoint_dir(source: str) -> Path:
    """The local folder of a model's safetensors checkpoint: `source` itself, or a hub name's snapshot
    in the Hugging Face cache (fetched by each machine's first rank while the others wait)."""
    local = Path(source).expanduser()
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download  # deferred: only hub names need it

    def fetch() -> Path:
        return Path(snapshot_download(source, allow_patterns=_HUB_FILES))

    if int(os.environ.get("LOCAL_RANK", "0") or 0) == 0:
        folder = fetch()
        dist.barrier()
        return folder
    dist.barrier()
    return fetch()  # in the cache now: no download


def _meta_model(folder: Path, dtype: torch.dtype) -> nn.Module:
    """The Hugging Face model of `folder`'s config with its parameters on the meta device (no memory)
    and its buffers (rotary frequencies, computed from the config) on the CPU."""
    import transformers
    from accelerate import init_empty_weights

    config = transformers.AutoConfig.from_pretrained(folder)
    config.output_attentions = True  # as the bridge's own loading sets it: its hooks read the pattern
    names = getattr(config, "architectures", None) or []
    model_class = getattr(transformers, names[0], None) if names else None
    if model_class is None:
        raise ValueError(f"shard='fsdp' needs a transformers model class in {folder}/config.json (architectures)")
    with init_empty_weights(include_buffers=False), contextlib.redirect_stdout(None):
        model = model_class._from_config(config, dtype=dtype, attn_implementation="eager")
    model.tie_weights()  # as loading a checkpoint does (tied embeddings: one weight, stored once)
    return model


def _checkpoint_names(model: nn.Module) -> dict[str, str]:
    """The checkpoint name of every parameter and persistent buffer of the bridged model (its own name
    without the bridge's `._original_component` segments)."""
    names = {name: plain_name(name) for name, _ in model.named_parameters()}
    for module_name, module in model.named_modules():
        for buffer_name in module._buffers:
            if buffer_name not in module._non_persistent_buffers_set and module._buffers[buffer_name] is not None:
                full = f"{module_name}.{buffer_name}" if module_name else buffer_name
                names[full] = plain_name(full)
    return names


def _stored_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(
            f"shard='fsdp' reads safetensors checkpoints and {folder} has none "
            "(convert it once with save_pretrained(..., safe_serialization=True))"
        )
    stored: set[str] = set()
    for file in files:
        # A truncated or damaged file is named here, on every rank alike, not as the loader's
        # SafetensorError on each rank mid-load.
        safetensors_header(file, "checkpoint file")
        try:
            with safe_open(str(file), framework="pt") as handle:
                stored.update(handle.keys())
        except Exception as error:  # safetensors raises its own error type for inconsistent files
            raise ValueError(f"checkpoint file {str(file)!r} is corrupted: {error}") from error
    return stored


def load_sharded(source: str, *, device: torch.device, dtype: torch.dtype) -> TransformerBridge:
    """`source`'s model as a bridge whose Hugging Face model is sharded over the ranks of the default
    process group (see the module's docstring); weights frozen, in eval mode, on `device`."""
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict_loader import load
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _, world = rank_and_world(required=True)
    seconds = rank_wait()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's collectives run on the current device
    folder = checkpoint_dir(source)
    stored = _stored_names(folder)
    hf = _meta_model(folder, dtype)
    model = TransformerBridge.boot_transformers(str(folder), hf_model=hf, dtype=dtype, device=device)
    hf = model.original_model
    for parameter in hf.parameters():
        parameter.requires_grad_(False)  # masks are trained, never the model
    names = _checkpoint_names(hf)
    missing = sorted({names[n] for n, _ in hf.named_parameters()} - stored)
    meta_buffers = {n for n, b in hf.named_buffers() if b.is_meta}
    computed = {n: b.clone() for n, b in hf.named_buffers() if not b.is_meta}
    # A buffer on the meta device is read from the checkpoint, or is the bridge's zero unembedding bias.
    unknown = sorted(n for n in meta_buffers if names.get(n) not in stored and not n.endswith("bias"))
    if missing or unknown:
        raise ValueError(
            f"shard='fsdp' cannot place the weights of {folder}: the checkpoint has no "
            f"{(missing or unknown)[:4]} (a checkpoint saved under other names loads without shard)"
        )
    mesh = init_device_mesh(device.type, (world,))
    units = shard_units(model)
    for unit in units:
        fully_shard(unit if len(unit) > 1 else unit[0], mesh=mesh, reshard_after_forward=True)
    # The bridge also reaches each layer's modules from its own block components: the whole model
    # must not take the units' weights a second time.
    taken = {p for unit in units for m in unit for p in m.parameters()}
    fully_shard(hf, mesh=mesh, reshard_after_forward=True, ignored_params=taken)
    hf.to_empty(device=device)
    with torch.no_grad():
        for name, buffer in hf.named_buffers():
            if name in computed:
                buffer.copy_(computed[name])
            elif name in meta_buffers and names.get(name) not in stored:
                buffer.zero_()  # the bridge's zero unembedding bias
    tensors: dict[str, torch.Tensor] = {**dict(hf.named_parameters()), **dict(hf.named_buffers())}
    wanted = {names[n]: t for n, t in tensors.items() if n in names and names[n] in stored}
    load(wanted, storage_reader=HuggingFaceStorageReader(str(folder)))
    model.eval()
    model.cfg.device = str(device)
    object.__setattr__(model, _SHARDED, True)
    calls = dist.new_group(backend="gloo", timeout=timedelta(seconds=seconds))  # every rank, as the load is
    object.__setattr__(model, _CALLS, (calls, seconds))
    with torch.no_grad():  # the whole model runs first: FSDP takes it as its root
        hf(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=False)
    return model


def sharded_samples(parameters: list[nn.Parameter], pick: Callable[[int], torch.Tensor]) -> list[torch.Tensor]:
    """Every parameter's weights-hash sample as int16 bits of bfloat16 (`pick(numel)`: the flat
    indices of the sampled elements of a tensor of `numel` elements), gathered from the ranks' shards: each rank reads the
    sampled elements inside its own shard of dim 0, and one sum over the ranks assembles them (a
    collective; a rank adds zeros where it holds nothing)."""
    rank, world = rank_and_world(required=True)
    pieces, sizes = [], []
    for parameter in parameters:
        index = pick(parameter.numel())
        sizes.append(index.numel())
        values = torch.zeros(index.numel(), dtype=torch.int32)
        if isinstance(parameter, DTensor):
            local = parameter.to_local()
            rows = parameter.shape[0]
            chunk = -(-rows // world)  # FSDP shards dim 0 as torch.chunk does
            first = min(rank * chunk, rows)
            if local.shape[0] != min(chunk, rows - first) or local.shape[1:] != parameter.shape[1:]:
                raise ValueError(f"a parameter of shape {tuple(parameter.shape)} is not sharded on dim 0 as expected")
            start = first * (parameter.numel() // rows)
        else:  # a replicated tensor: rank 0 gives it
            local, start = (parameter, 0) if rank == 0 else (parameter[:0], 0)
        flat = local.detach().reshape(-1)
        inside = (index >= start) & (index < start + flat.numel())
        picked = flat[(index[inside] - start).to(flat.device)]
        values[inside] = picked.to(torch.bfloat16).view(torch.int16).to(torch.int32).cpu()
        pieces.append(values)
    device = next((p.device for p in parameters), torch.device("cpu"))
    total = (torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int32)).to(device)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return [part.to(torch.int16) for part in total.cpu().split(sizes)]
