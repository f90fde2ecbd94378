"""Safetensors files that are byte-reproducible and that fail with a message naming the file.

The safetensors writer keeps its `__metadata__` in a hash map, so the same tensors and metadata come
out in a different header order from one process to the next; checksums of reproduced runs would
differ although nothing else does. `write_safetensors` rewrites the header with sorted keys.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

from .._formats import safetensors_header
from .._io import atomic_write

# The format pads the JSON header with spaces so that tensor data starts 8-byte aligned.
_ALIGN = 8
_LENGTH_BYTES = 8


def safetensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """The file's bytes: safetensors' own data layout, with a header in sorted key order."""
    raw = save_bytes({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata=metadata)
    length = int.from_bytes(raw[:_LENGTH_BYTES], "little")
    header = json.loads(raw[_LENGTH_BYTES : _LENGTH_BYTES + length])
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % _ALIGN)
    return len(text).to_bytes(_LENGTH_BYTES, "little") + text + raw[_LENGTH_BYTES + length :]


def write_safetensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    """Write `tensors` and string `metadata` atomically; the same input always gives the same bytes."""
    data = safetensors_bytes(tensors, metadata)
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def read_safetensors(
    path: str | os.PathLike, what: str = "safetensors file"
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of `path`; a missing, truncated or corrupted file is a ValueError naming it."""
    path = Path(path)
    header = safetensors_header(path, what)  # missing, truncated, a malformed header: named before reading
    data = path.read_bytes()
    try:
        tensors = load_bytes(data)
    except Exception as error:  # safetensors raises its own error type for inconsistent files
        raise ValueError(f"{what} {str(path)!r} is corrupted: {error}") from error
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{what} {str(path)!r} has a malformed header (__metadata__ is not an object)")
    return tensors, metadata


def content_checksum(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    """sha256 of the tensors (names, dtypes, shapes, bytes) and the metadata except `checksum`."""
    digest = hashlib.sha256()
    for key in sorted(k for k in metadata if k != "checksum"):
        digest.update(json.dumps([key, metadata[key]]).encode())
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()}"
