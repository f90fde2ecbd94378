"""Reading GGUF files: their metadata, their tensors dequantised, and a whole file converted by
`transformers` into an fp32 Hugging Face directory."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, LlamaFileType
from gguf.quants import dequantize

from ..._io import atomic_write_json


def gguf_reader(path: str | os.PathLike) -> GGUFReader:
    """`path` opened by gguf's reader. A file that is not GGUF, or is truncated or damaged (the reader
    fails with an IndexError, a reshape or mmap ValueError, ...), is a ValueError naming it and its size."""
    try:
        return GGUFReader(str(path))
    except (OSError, ValueError, IndexError, KeyError, TypeError, OverflowError, struct.error) as error:
        try:
            size = f"{os.path.getsize(path):,} bytes"
        except OSError:
            size = "unreadable"
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise ValueError(
            f"could not read the GGUF file {path} ({size}): it is truncated, damaged or not a GGUF file ({reason}); "
            "download or copy it again"
        ) from error


def _metadata(gguf_path: Path) -> dict:
    """The GGUF key-value metadata that matters here (scalars and strings, not the vocabulary)."""
    reader = gguf_reader(gguf_path)
    wanted = ("general.architecture", "general.file_type", "tokenizer.chat_template", "tokenizer.ggml.model")
    values = {}
    for key, field in reader.fields.items():
        if not (key in wanted or (key.startswith("tokenizer.ggml.") and key.endswith("_token_id"))):
            continue
        part = field.parts[field.data[0]]
        values[key] = bytes(part).decode("utf-8") if field.types[0] == GGUFValueType.STRING else part[0].item()
    return values


def _file_type(gguf_path: Path) -> str | None:
    code = _metadata(gguf_path).get("general.file_type")
    try:
        return None if code is None else LlamaFileType(code).name
    except ValueError:
        return str(code)


def _dequantise(gguf_path: Path, out: Path, stage=lambda text: None) -> None:
    """Read the GGUF file with transformers and save it as an fp32 directory; `stage(text)` is told
    what is happening (each stage takes seconds to tens of seconds)."""
    stage("importing transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer  # deferred: seconds, and only a conversion needs it

    folder, name = str(gguf_path.parent), gguf_path.name
    try:  # the libraries' bars follow the progress switch and the log rule (`_progress`)
        stage("reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        stage("dequantising the weights")
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
    except (OSError, ValueError, KeyError, NotImplementedError) as error:
        raise ValueError(f"transformers could not read the GGUF file {gguf_path}: {error}") from error
    # The weights are plain floats now; a kept quantization_config would make loaders look for GGUF.
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    setattr(model, "hf_quantizer", None)  # noqa: B010 (not a module attribute: nn.Module's typed setattr refuses None)
    _match_gguf_tokens(tokenizer, model, _metadata(gguf_path))
    stage("writing the fp32 weights")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _tidy_tokenizer_config(out / "tokenizer_config.json")


def _tidy_tokenizer_config(path: Path) -> None:
    """Drop the loader's own arguments from the saved config and name a class that transformers 4
    and 5 both know (the tokenizer itself is the saved tokenizer.json either way)."""
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    for key in ("gguf_file", "local_files_only", "is_local", "name_or_path"):
        config.pop(key, None)
    if config.get("tokenizer_class") in ("TokenizersBackend", None):
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    atomic_write_json(path, config)


def _match_gguf_tokens(tokenizer, model, metadata: dict) -> None:
    """Make the tokenizer and configs carry the GGUF file's chat template and special tokens."""
    template = metadata.get("tokenizer.chat_template")
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template
    for role in ("bos", "eos", "pad", "unk"):
        token_id = metadata.get(f"tokenizer.ggml.{role}_token_id")
        if token_id is None or token_id >= len(tokenizer):
            continue
        if getattr(tokenizer, f"{role}_token_id") != token_id:
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(token_id)))
        if role != "unk":
            for config in (model.config, model.generation_config):
                setattr(config, f"{role}_token_id", int(token_id))


def read_gguf_tensors(path: str | os.PathLike, names: list[str]) -> dict[str, np.ndarray]:
    """Tensors of a GGUF file dequantised to float32, in GGUF's numpy layout (`[ne1, ne0]`: a weight
    as `[out, in]`, like `nn.Linear.weight`); a missing name is a ValueError."""
    stored = {t.name: t for t in gguf_reader(path).tensors}
    missing = [name for name in names if name not in stored]
    if missing:
        raise ValueError(f"the GGUF file {path} has no tensor {missing[0]!r} ({len(missing)} missing)")
    return {  # copies: the file is memory-mapped read-only
        name: np.array(dequantize(stored[name].data, stored[name].tensor_type), dtype=np.float32) for name in names
    }
