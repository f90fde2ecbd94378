"""`write_scaled_gguf`: a GGUF file copied with some tensors' input columns scaled, types kept where exact."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize

from headsup_lens.models._gguf import read_gguf_tensors, write_scaled_gguf

from .conftest import bpe_tokenizer, random_llama, write_llama_gguf

ATTN_OUT = "blk.0.attn_output.weight"
FFN_DOWN = "blk.1.ffn_down.weight"
NORM = "blk.0.attn_norm.weight"


@pytest.fixture(scope="module")
def quantised(tmp_path_factory):
    """A GGUF file with layer outputs in Q4_1 (block 32) and Q8_0, everything else F32; d_model 64."""
    tokenizer = bpe_tokenizer()
    model = random_llama(tokenizer, tie=False)
    path = tmp_path_factory.mktemp("gguf") / "q.gguf"
    return write_llama_gguf(model, tokenizer, path, quantise={"attn_output": "Q4_1", "ffn_down": "Q8_0"})


def tensors_of(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def values(tensor) -> np.ndarray:
    return np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)


def test_block_constant_scales_keep_the_type_and_scale_exactly(quantised, tmp_path):
    before = tensors_of(quantised)
    per_block = np.array([0.0, 0.25], dtype=np.float32)  # ne0 = 64: two Q4_1 blocks per row
    attn = np.repeat(per_block, 32)
    down = np.full(int(before[FFN_DOWN].shape[0]), 0.5, dtype=np.float32)
    norm = np.linspace(0, 1, int(before[NORM].shape[0]), dtype=np.float32)
    target = tmp_path / "scaled.gguf"
    report = write_scaled_gguf(quantised, target, {ATTN_OUT: attn, FFN_DOWN: down, NORM: norm}, {"test.note": "hi"})
    assert report == {ATTN_OUT: "Q4_1 (kept)", FFN_DOWN: "Q8_0 (kept)", NORM: "F32 (kept)"}

    after = tensors_of(target)
    assert after[ATTN_OUT].tensor_type == gguf.GGMLQuantizationType.Q4_1
    # Scaling the float16 block scales by 0 or a power of two is exact.
    assert np.array_equal(values(after[ATTN_OUT]), values(before[ATTN_OUT]) * attn)
    assert np.array_equal(values(after[FFN_DOWN]), values(before[FFN_DOWN]) * 0.5)
    assert np.allclose(values(after[NORM]), values(before[NORM]) * norm, rtol=0, atol=1e-7)
    for name, tensor in after.items():
        if name not in report:
            assert tensor.tensor_type == before[name].tensor_type
            assert np.array_equal(np.asarray(tensor.data), np.asarray(before[name].data)), name

    reader, source = gguf.GGUFReader(str(target)), gguf.GGUFReader(str(quantised))
    assert reader.fields["test.note"].contents() == "hi"
    for key, field in source.fields.items():
        if not key.startswith("GGUF."):
            assert reader.fields[key].contents() == field.contents(), key


def test_scales_that_split_a_block_fall_back_to_f32(quantised, tmp_path):
    before = tensors_of(quantised)
    attn = np.repeat(np.array([1, 0, 1, 1, 0.5, 1, 1, 0], dtype=np.float32), 8)  # d_head 8: 4 heads per block
    report = write_scaled_gguf(quantised, tmp_path / "f32.gguf", {ATTN_OUT: attn})
    assert report == {ATTN_OUT: "F32 (was Q4_1)"}
    after = tensors_of(tmp_path / "f32.gguf")
    assert after[ATTN_OUT].tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(values(after[ATTN_OUT]), values(before[ATTN_OUT]) * attn)
    (stored,) = read_gguf_tensors(tmp_path / "f32.gguf", [ATTN_OUT]).values()
    assert stored.shape == (64, 64)


def test_bad_names_and_shapes_are_refused_before_writing(quantised, tmp_path):
    with pytest.raises(ValueError, match="no tensor 'blk.9.attn_output.weight'"):
        write_scaled_gguf(quantised, tmp_path / "x.gguf", {"blk.9.attn_output.weight": np.ones(64)})
    with pytest.raises(ValueError, match="first dimension"):
        write_scaled_gguf(quantised, tmp_path / "x.gguf", {ATTN_OUT: np.ones(63)})
    assert not (tmp_path / "x.gguf").exists()
    with pytest.raises(ValueError, match="no tensor 'missing'"):
        read_gguf_tensors(quantised, ["missing"])


@pytest.mark.parametrize("kind", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_k_quants_keep_their_type_when_each_super_block_has_one_scale(kind, tmp_path):
    """A K-quant super-block (256 values, Gemma-3-270M's d_head) scales with its float16 d (and dmin)."""
    qtype = gguf.GGMLQuantizationType[kind]
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(0)
    rows, n_in = 3, 2 * block_size  # two super-blocks per row: two "heads" of 256
    raw = rng.integers(0, 256, size=(rows, n_in // block_size * type_size), dtype=np.uint8)
    blocks = raw.reshape(rows, -1, type_size)
    # finite float16 super-block scales at every offset that could hold them (random bytes can be NaN)
    for offset in range(0, type_size - 1, 2):
        blocks[..., offset : offset + 2] = (
            rng.uniform(-0.1, 0.1, blocks.shape[:2]).astype(np.float16)[..., None].view(np.uint8)
        )
    source = tmp_path / "k.gguf"
    writer = gguf.GGUFWriter(str(source), "llama")
    writer.add_tensor("w", raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    scale = np.repeat(np.array([0.0, 0.5], dtype=np.float32), block_size)
    report = write_scaled_gguf(source, tmp_path / "scaled.gguf", {"w": scale})
    assert report == {"w": f"{kind} (kept)"}
    before, after = tensors_of(source)["w"], tensors_of(tmp_path / "scaled.gguf")["w"]
    assert after.tensor_type == qtype
    assert np.array_equal(values(after), values(before) * scale)
    assert np.abs(values(before)[:, block_size:]).max() > 0  # the kept half was not zero to begin with
