"""A bridged model as a plain Hugging Face model again: its weights under their own names, no hooks."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from torch import nn
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoTokenizer, PreTrainedModel

from ._bridge import plain_name
from ._gguf import _tidy_tokenizer_config
from ._sharding import is_sharded


def hf_model(model: TransformerBridge) -> PreTrainedModel:
    """A plain Hugging Face copy of the bridged model's weights, to save with `save_pretrained`.

    The bridge wraps the Hugging Face modules in place, so the original model's own state dict
    carries `._original_component` segments and aliases; a fresh model of the same config gets
    the weights under their plain names, in the original's dtype, with the original's generation
    config. The copy shares no tensor with `model`: editing it leaves `model` as it was.
    """
    if is_sharded(model):
        raise ValueError(
            "a model sharded with FSDP holds a share of each weight on every rank: load it without shard to copy "
            "or save it as one Hugging Face model"
        )
    original: Any = model.original_model  # a transformers PreTrainedModel
    config = copy.deepcopy(original.config)
    config.output_attentions = False  # the bridge turns it on for its hooks; plain users want it off
    clean = type(original)(config)
    wanted = clean.state_dict()
    found = {}
    for key, value in original.state_dict().items():
        plain = plain_name(key)
        if plain in wanted and plain not in found:
            found[plain] = value
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise ValueError(f"could not find bridged weights for {missing[:5]}")
    dtype = next(iter(found.values())).dtype if found else None
    if dtype is not None and dtype.is_floating_point:
        clean.to(dtype)  # a fresh model is built in the default dtype; keep the checkpoint's
    clean.load_state_dict(found, strict=True)
    if getattr(original, "generation_config", None) is not None:
        generation = copy.deepcopy(original.generation_config)
        if generation.output_attentions:
            # Derived from a config the bridge had switched to output attentions (the built-in organism's
            # is): `generate` would then return attentions in a dict instead of token ids.
            generation.output_attentions = False
            generation.return_dict_in_generate = False
        clean.generation_config = generation
    return clean.eval()


def plain_module(model: TransformerBridge, clean: nn.Module, module: nn.Module) -> nn.Module:
    """The module of `clean` (an `hf_model(model)` copy) that holds the weights of `module`, a Hugging
    Face module inside the bridged `model` (e.g. `model.blocks[3].attn.o.original_component`).

    The bridge can reach one module under several names (GPT-2's `attn.c_proj` is also `attn.o`);
    the name the plain model has is the one used.
    """
    mine = dict(clean.named_modules())
    for name, candidate in model.original_model.named_modules(remove_duplicate=False):
        plain = plain_name(name)
        if candidate is module and plain in mine:
            return mine[plain]
    raise ValueError(f"{type(module).__name__} is not a module of the plain Hugging Face model")


def save_hf_tokenizer(model: TransformerBridge, folder: str | os.PathLike) -> None:
    """Write the model's tokenizer (with its chat template) into `folder` as its source ships it.

    The bridge's own tokenizer is set up for TransformerLens (it prepends BOS), so the tokenizer is
    read again from the model's source (its local directory, or the hub cache) and saved as loaded.
    """

    original: Any = model.original_model
    source = getattr(original.config, "_name_or_path", "") or str(model.cfg.model_name or "")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"could not read the tokenizer of the model's source {source!r} again ({error}); the model must "
            "come from a directory that still exists or from the hub"
        ) from error
    tokenizer.save_pretrained(folder)
    _tidy_tokenizer_config(Path(folder) / "tokenizer_config.json")
