"""Writing GGUF files: a copy of a GGUF file with the input columns of some tensors scaled (a baked
mask), block types kept where they can carry the scale."""

from __future__ import annotations

import os
from typing import Any

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from ._read import gguf_reader

# Block types with float16 fields that multiply every value of the block (value = d * q, d * q + m,
# or for the K-quants' 256-value super-blocks d * scale_j * q - dmin * m_j): scaling those fields
# scales the block. (byte offset of the first field in the block, count of consecutive fields), as
# llama.cpp's block structs lay them out (ggml-common.h): the K-quants other than Q4_K/Q5_K keep d last.
_SCALED_FIELDS = {
    "Q4_0": (0, 1),
    "Q4_1": (0, 2),
    "Q5_0": (0, 1),
    "Q5_1": (0, 2),
    "Q8_0": (0, 1),
    "Q2_K": (80, 2),  # scales[16] qs[64] d dmin
    "Q3_K": (108, 1),  # hmask[32] qs[64] scales[12] d
    "Q4_K": (0, 2),  # d dmin scales[12] qs[128]
    "Q5_K": (0, 2),  # d dmin scales[12] qh[32] qs[128]
    "Q6_K": (208, 1),  # ql[128] qh[64] scales[16] d
}
FALLBACK_TYPE = "F32"  # what a scaled tensor becomes when its own type cannot carry the scale


def write_scaled_gguf(
    source: str | os.PathLike,
    target: str | os.PathLike,
    scales: dict[str, np.ndarray],
    metadata: dict[str, str] | None = None,
) -> dict[str, str]:
    """Copy the GGUF file `source` to `target` with the columns of some tensors scaled.

    `scales[name]` is a float vector over the tensor's first GGUF dimension `ne0` (the input
    dimension of a weight, whose numpy layout is `[out, in]`; the only dimension of a bias): element
    `[..., i]` is multiplied by `scales[name][i]`. Every other tensor and every metadata entry is
    copied byte for byte; `metadata` adds string entries. A scaled tensor keeps its type where the
    type can carry the scale exactly up to float16 rounding of the block scales (F32, F16, and
    Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 or the K-quants Q2_K to Q6_K when the scale is constant within each
    block, 32 values or a 256-value super-block: their float16 block scales are multiplied; a scale
    of 0 or a power of two is exact); otherwise it is dequantised and
    written as F32. Returns `{name: "Q4_1 (kept)" | "F32 (was Q6_K)"}` for each scaled tensor.
    """
    reader = gguf_reader(source)
    tensors = {t.name: t for t in reader.tensors}
    unknown = sorted(set(scales) - set(tensors))
    if unknown:
        raise ValueError(f"the GGUF file {source} has no tensor {unknown[0]!r} ({len(unknown)} missing)")
    for name, scale in scales.items():
        if np.asarray(scale).shape != (int(tensors[name].shape[0]),):
            raise ValueError(
                f"the scale of {name} has shape {np.asarray(scale).shape}, not its first dimension "
                f"({int(tensors[name].shape[0])},)"
            )
    architecture = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(target), architecture)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    written, report = [], {}
    for tensor in reader.tensors:
        data, kind = tensor.data, tensor.tensor_type
        if tensor.name in scales:
            data, kind = _scaled(tensor, np.asarray(scales[tensor.name], dtype=np.float32))
            kept = kind == tensor.tensor_type
            report[tensor.name] = f"{kind.name} (kept)" if kept else f"{kind.name} (was {tensor.tensor_type.name})"
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, kind)
        written.append(data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in written:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
    return report


def _scaled(tensor: Any, scale: np.ndarray) -> tuple[np.ndarray, Any]:
    """(data, type) of `tensor` with element `[..., i]` multiplied by `scale[i]` (see `write_scaled_gguf`)."""
    kind = tensor.tensor_type
    if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        values = np.asarray(tensor.data)
        return (values.astype(np.float32) * scale).astype(values.dtype), kind
    fields = _SCALED_FIELDS.get(kind.name)
    block_size, type_size = GGML_QUANT_SIZES[kind]
    n_in = scale.shape[0]
    if fields is not None and n_in % block_size == 0:
        per_block = scale.reshape(-1, block_size)
        if (per_block == per_block[:, :1]).all():  # one scale per block: multiply its float16 scales
            start, end = fields[0], fields[0] + 2 * fields[1]
            blocks = np.array(tensor.data, dtype=np.uint8).reshape(-1, n_in // block_size, type_size)
            head = blocks[..., start:end].copy().view(np.float16)
            head = (head.astype(np.float32) * per_block[:, 0][None, :, None]).astype(np.float16)
            blocks[..., start:end] = head.view(np.uint8)
            return blocks.reshape(tensor.data.shape), kind
    values = np.asarray(dequantize(tensor.data, kind), dtype=np.float32)
    return values * scale, GGMLQuantizationType[FALLBACK_TYPE]
