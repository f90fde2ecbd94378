"""Model identity: what a head mask must agree with before it may gate a model.

A model is identified by its content: its structure plus a hash of its configuration and of a fixed
sample of every weight. The name is kept for people to read; it never decides whether a mask fits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformer_lens.model_bridge import TransformerBridge

from ._builtin import BUILTIN_MODELS, builtin_model_dir
from ._builtin import portable_name as portable_name
from ._sharding import is_sharded, local_tensor, sharded_samples

# Elements hashed per weight tensor, at a fixed stride from the first: every tensor of a fine-tuned
# twin differs almost everywhere, so a few thousand samples tell two checkpoints apart.
SAMPLES_PER_TENSOR = 4096
_HASH_SCHEME = "sha256-strided-bf16-v1"
# Config entries that, with the weights, decide what a model computes (paths and dtypes excluded).
_CONFIG_KEYS = ("architecture", "n_layers", "n_heads", "d_head", "d_model", "d_mlp", "d_vocab", "n_key_value_heads")

_CACHE: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ModelFingerprint:
    """What a head mask must agree with before it may gate a model.

    `content_hash` identifies the weights (see `weights_hash`); it is None for fingerprints written
    before it existed or built by hand, and then only the structure can be compared. `name` is the
    hub name or the model folder's base name, for people only.
    """

    architecture: str
    n_layers: int
    n_heads: int
    d_head: int
    d_vocab: int
    name: str
    content_hash: str | None = None

    def structural(self) -> tuple:
        """The shape of the model: masks move between base and instruct twins that share it."""
        return (self.architecture, self.n_layers, self.n_heads, self.d_head, self.d_vocab)

    def same_weights(self, other: ModelFingerprint) -> bool | None:
        """True / False when both carry a content hash; None when either does not (cannot tell)."""
        if self.content_hash is None or other.content_hash is None:
            return None
        return self.content_hash == other.content_hash

    def to_dict(self) -> dict:
        """The fingerprint as a JSON-ready dict (stored in mask files and run folders)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelFingerprint:
        """A fingerprint from its JSON form (`to_dict`); a missing field or a non-object is a `ValueError`
        (`content_hash` is optional).
        """
        if not isinstance(data, dict):
            raise ValueError(f"a model fingerprint must be a JSON object, got {type(data).__name__}")
        required = {k for k in cls.__dataclass_fields__ if k != "content_hash"}
        missing = required - set(data)
        if missing:
            raise ValueError(f"model fingerprint is missing fields {sorted(missing)}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def describe_difference(self, other: ModelFingerprint) -> str:
        """The fields that differ from `other`, as `name: this vs other` (empty when none does)."""
        diffs = [
            f"{k}: {_short(getattr(self, k))!r} vs {_short(getattr(other, k))!r}"
            for k in self.__dataclass_fields__
            if getattr(self, k) != getattr(other, k)
        ]
        return ", ".join(diffs)

    def describe(self) -> str:
        """`'name' (LlamaForCausalLM, 30x9 heads, weights 1a2b3c4d)` for messages."""
        weights = f", weights {_short(self.content_hash)}" if self.content_hash else ""
        return f"{self.name!r} ({self.architecture}, {self.n_layers}x{self.n_heads} heads{weights})"


def _short(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[len("sha256:") :][:12]
    return value


def fingerprint(model: TransformerBridge, *, content: bool = True) -> ModelFingerprint:
    """The fingerprint of a loaded model: its TransformerLens config plus a hash of its weights.

    The hash (`weights_hash`) is cached per model and recomputed only when a weight changes (a
    model loaded sharded keeps the hash its ranks read together at load).
    `content=False` skips it (structure only, for checks that need nothing more).
    """
    cfg = model.cfg
    return ModelFingerprint(
        architecture=_architecture(model),
        n_layers=int(cfg.n_layers),
        n_heads=int(cfg.n_heads),
        d_head=int(cfg.d_head),
        d_vocab=int(cfg.d_vocab),
        name=display_name(str(getattr(cfg, "model_name", "") or "")),
        content_hash=weights_hash(model) if content else None,
    )


def _architecture(model: Any) -> str:
    original = getattr(model, "original_model", model)
    return str(getattr(model.cfg, "architecture", None) or type(original).__name__)


def display_name(source: str) -> str:
    """The name a file may record: a hub name as given, a local folder by its base name only.

    Absolute local paths would tie files to one machine and leak its layout.
    """
    if not source:
        return ""
    path = Path(source).expanduser()
    local = path.is_absolute() or source.startswith((".", "~")) or path.exists()
    if not local:
        return source
    path = path.resolve()
    for builtin in BUILTIN_MODELS:
        folder = builtin_model_dir(builtin)
        if folder is not None and folder.resolve() == path:
            return builtin
    return path.name


def weights_hash(model: nn.Module) -> str:
    """`"sha256:<hex>"` over the model's config and a fixed strided sample of every weight.

    Parameters are taken in registration order (the Hugging Face model's own order; tied weights
    once); each contributes its shape and `SAMPLES_PER_TENSOR` elements at a fixed stride, rounded
    to bfloat16, so the same checkpoint loaded in fp32 or bf16, on any device and through any path,
    hashes alike. Weights that differ only outside the sampled elements are not told apart.

    An fp16 copy cannot hash alike by itself: fp16 rounds a weight next to a bf16 rounding boundary
    onto the boundary, so its bf16 rounding no longer tells which side the weight was on.
    `load_model(dtype="fp16")` therefore records the hash of the checkpoint itself
    (`remember_weights_hash`); a model cast to fp16 by other means hashes as other weights.
    """
    cached = _CACHE.get(model)
    if cached is not None and is_sharded(model):
        # FSDP registers gathered tensors in place of a unit's shards between its forward and its
        # reshard, so parameter identity cannot tell an edit there; a sharded model's weights are
        # frozen, and its hash is read once, at load, by every rank together. Recomputing it here
        # would be a collective made only by the ranks whose gathered tensors moved.
        return cached[1]
    parameters = list(getattr(model, "original_model", model).parameters())
    key = _weights_key(parameters)
    if cached is not None and cached[0] == key:
        return cached[1]
    digest = hashlib.sha256()
    digest.update(_HASH_SCHEME.encode())
    cfg = getattr(model, "cfg", None)
    config = {k: _jsonable(getattr(cfg, k, None)) for k in _CONFIG_KEYS} if cfg is not None else {}
    if cfg is not None:
        config["architecture"] = _architecture(model)
    digest.update(json.dumps(config, sort_keys=True).encode())
    with torch.no_grad():
        for parameter, sample in zip(parameters, _host_samples(parameters)):
            digest.update(json.dumps(list(parameter.shape)).encode())
            digest.update(sample.numpy().tobytes())
    value = "sha256:" + digest.hexdigest()
    with contextlib.suppress(TypeError):  # not weak-referenceable: no cache
        _CACHE[model] = (key, value)
    return value


def remember_weights_hash(model: nn.Module, value: str) -> None:
    """Make `value` the weights hash of `model` as its weights are now (until one is replaced or edited)."""
    parameters = list(getattr(model, "original_model", model).parameters())
    _CACHE[model] = (_weights_key(parameters), value)


def _weights_key(parameters: list[nn.Parameter]) -> tuple:
    # Parameter identity and in-place version counters change whenever a weight is replaced or edited
    # (a sharded model's hash is kept from its load instead: see `weights_hash`).
    local = [local_tensor(p) for p in parameters]
    return tuple((id(p), t.data_ptr(), t._version, tuple(p.shape)) for p, t in zip(parameters, local))


def _sample_index(numel: int) -> Tensor:
    """The flat indices of the elements of a `numel`-element tensor that its hash reads."""
    return torch.arange(0, numel, max(1, numel // SAMPLES_PER_TENSOR))[:SAMPLES_PER_TENSOR]


def _sample(parameter: Tensor) -> Tensor:
    flat = parameter.detach().reshape(-1)
    # A strided view: only the sampled elements are ever read or copied.
    sample = flat[:: max(1, flat.numel() // SAMPLES_PER_TENSOR)][:SAMPLES_PER_TENSOR]
    # bf16 bits: fp32 and bf16 loads of one checkpoint agree.
    return sample.to(torch.bfloat16).view(torch.int16)


def _host_samples(parameters: list[nn.Parameter]) -> list[Tensor]:
    """Every parameter's sample on the host, copied once per device (not once per parameter: on a
    GPU each copy waits for the device). Weights sharded over ranks (`load_model(shard=...)`) are
    sampled from every rank's shard together (`sharded_samples`, a collective)."""
    if any(local_tensor(p) is not p for p in parameters):
        return sharded_samples(parameters, _sample_index)
    samples = [_sample(p) for p in parameters]
    host: list[Tensor] = [torch.empty(0, dtype=torch.int16)] * len(samples)
    by_device: dict[torch.device, list[int]] = {}
    for i, sample in enumerate(samples):
        by_device.setdefault(sample.device, []).append(i)
    for indices in by_device.values():
        joined = torch.cat([samples[i] for i in indices]).cpu()
        for i, part in zip(indices, joined.split([samples[i].numel() for i in indices])):
            host[i] = part
    return host


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
