"""`HeadMask`: which attention heads a model keeps (1), removes (0) or scales (in between)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from .._typecheck import advise
from .._validate import (
    check_choice,
    check_finite,
    check_int,
    check_mask_values,
    check_out_file,
    check_sequence,
    check_shape,
    check_tensor,
    describe,
)
from .._warnings import warn
from ..models._fingerprint import ModelFingerprint, fingerprint, portable_name
from ._files import content_checksum, read_safetensors, write_safetensors

Head = tuple[int, int]
HeadSet = Literal["kept", "removed"]  # which heads of a mask a similarity compares
HEAD_SETS = ("kept", "removed")
Shuffle = Literal["model", "layer"]  # where a random baseline may move a mask's kept heads
_FORMAT = "headsup_lens.HeadMask"
_FORMAT_VERSION = 1


class UnverifiedMaskWarning(UserWarning):
    """A mask file without a checksum (written before files carried one): its contents were not verified."""


class UnverifiedModelWarning(UserWarning):
    """A mask without a weights hash (a file written before it existed): only its structure was checked."""


@dataclass
class HeadMask:
    """A head mask `values[layer, head]` with the logits it was trained from and the model it fits.

    `values` are 1 (keep), 0 (remove) or in between (scale). `logits` are the trained real
    weights M; `sigmoid(logits)` is the paper's head weight. `mlp_values` is the optional
    per-layer MLP slot of the paper's appendix (off by default). `model` identifies the weights
    the mask was made for (`fingerprint(model)`); `metadata` is JSON (string keys at every level;
    tuples are kept as lists, as the file stores them). With `logits`, `values` must be
    `1[sigmoid(logits) >= 0.5]` (`from_logits`): a soft mask has no logits.
    """

    # Shapes are [n_layers, n_heads] (mlp_values: [n_layers]); they are left open in the annotations
    # because __post_init__ checks them and raises a ValueError that names the problem.
    values: Float[Tensor, "*shape"]
    logits: Float[Tensor, "*logits_shape"] | None = None
    model: ModelFingerprint | None = None
    mlp_values: Float[Tensor, "*mlp_shape"] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.values = _as_float_tensor("values", self.values)
        check_shape("mask values", self.values, "n_layers n_heads")
        check_mask_values("mask values", self.values)
        if self.logits is not None:
            self.logits = _as_float_tensor("logits", self.logits)
            if self.logits.shape != self.values.shape:
                raise ValueError(
                    f"logits shape {list(self.logits.shape)} differs from values shape {list(self.values.shape)}"
                )
            check_finite("mask logits", self.logits)
            _check_values_follow_logits(self.values, self.logits)
        if self.mlp_values is not None:
            self.mlp_values = _as_float_tensor("mlp_values", self.mlp_values)
            check_shape("mlp_values", self.mlp_values, "n_layers", n_layers=self.n_layers)
            check_mask_values("mlp_values", self.mlp_values)
        if self.model is not None and not isinstance(self.model, ModelFingerprint):
            raise TypeError(f"model must be a ModelFingerprint or None, got {describe(self.model)}")
        if self.model is not None and (self.model.n_layers, self.model.n_heads) != tuple(self.values.shape):
            raise ValueError(
                f"mask shape {list(self.values.shape)} does not match its model "
                f"({self.model.n_layers} layers x {self.model.n_heads} heads)"
            )
        self.metadata = _check_metadata(self.metadata)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_logits(
        cls, logits: Float[Tensor, "n_layers n_heads"], model: ModelFingerprint | None = None, **metadata: Any
    ) -> HeadMask:
        """The paper's final mask: keep a head where `sigmoid(logit) >= 0.5` (no noise)."""
        logits = _as_float_tensor("logits", logits)
        check_shape("logits", logits, "n_layers n_heads")
        check_finite("mask logits", logits)
        return cls((logits >= 0).float(), logits=logits, model=model, metadata=dict(metadata))

    @classmethod
    def full(cls, model_or_shape: Any) -> HeadMask:
        """All heads kept; accepts a model, a `ModelFingerprint` or an `(n_layers, n_heads)` shape."""
        fp = _fingerprint_of(model_or_shape)
        shape = shape_of(fp or model_or_shape)
        return cls(torch.ones(shape), model=fp)

    @classmethod
    def from_heads(cls, removed: list[Head], model_or_shape: Any) -> HeadMask:
        """All heads kept except `removed`, a list of `(layer, head)`."""
        mask = cls.full(model_or_shape)
        return mask._with_zeros(mask._check_heads("removed", removed))

    # ----------------------------------------------------------------- properties
    @property
    def n_layers(self) -> int:
        """Layers of the model the mask is for (`values.shape[0]`)."""
        return self.values.shape[0]

    @property
    def n_heads(self) -> int:
        """Attention heads per layer (`values.shape[1]`)."""
        return self.values.shape[1]

    @property
    def n_total(self) -> int:
        """All heads, `n_layers * n_heads` (N of Table 5's chance level)."""
        return self.values.numel()

    @property
    def n_kept(self) -> int:
        """Heads with a non-zero value."""
        return int((self.values > 0).sum())

    @property
    def weights(self) -> Float[Tensor, "n_layers n_heads"]:
        """The paper's head weights `sigmoid(M)`; the values themselves when no logits exist."""
        return torch.sigmoid(self.logits) if self.logits is not None else self.values

    def kept_heads(self) -> list[Head]:
        """`(layer, head)` of every head the mask keeps (value > 0), in layer-major order."""
        return [(int(layer), int(head)) for layer, head in (self.values > 0).nonzero().tolist()]

    def removed_heads(self) -> list[Head]:
        """`(layer, head)` of every head the mask removes (value 0): the pathway, in layer-major order."""
        return [(int(layer), int(head)) for layer, head in (self.values == 0).nonzero().tolist()]

    def removed_mlp_layers(self) -> list[int]:
        """The layers whose MLP output the mask removes (FFN slot below 0.5; App. C.3.3); none
        for a heads-only mask."""
        if self.mlp_values is None:
            return []
        return [layer for layer, value in enumerate(self.mlp_values.tolist()) if value < 0.5]

    # ----------------------------------------------------------------- derived masks
    def binary(self) -> HeadMask:
        """1 where a head is kept (value > 0), else 0."""
        return self._derive((self.values > 0).float())

    def without(self, heads: list[Head]) -> HeadMask:
        """A copy with `heads` removed."""
        return self._with_zeros(self._check_heads("heads", heads))

    def shuffled(self, seed: int = 0, within: Shuffle = "model") -> HeadMask:
        """The paper's random-mask baseline: the same number of kept heads, at random places.

        `within="model"` (the paper's) draws the places anywhere in the model; `within="layer"` keeps
        each layer's count and shuffles its heads only, a control matched to where the mask removes
        heads (a random mask of the same size often removes whole early layers, which breaks a
        small model for reasons the learned mask does not share)."""
        seed = check_int("seed", seed, minimum=0)
        generator = torch.Generator().manual_seed(seed)
        if within == "model":
            permutation = torch.randperm(self.n_total, generator=generator)
            values = self.values.flatten()[permutation].reshape(self.values.shape)
        else:
            columns = torch.stack([torch.randperm(self.n_heads, generator=generator) for _ in range(self.n_layers)])
            values = torch.gather(self.values, 1, columns)
        metadata = {**self.metadata, "shuffled_seed": seed} | ({} if within == "model" else {"shuffled_within": within})
        return HeadMask(values, model=self.model, metadata=metadata)

    def removal_order(self) -> list[Head]:
        """Every head, in ascending order of weight (the order of the one-by-one removal sweep).

        Ties are broken by position (layer, then head), so the order is deterministic.
        """
        flat = self.weights.flatten()
        order = sorted(range(flat.numel()), key=lambda i: (flat[i].item(), i))
        return [divmod(i, self.n_heads) for i in order]

    # ----------------------------------------------------------------- similarity
    def jaccard(self, other: HeadMask, heads: HeadSet = "kept") -> float:
        """Jaccard index |A ∩ B| / |A ∪ B| of the two masks' `heads` (1.0 when both sets are empty):
        "kept" (the default, Table 5's mask similarity) or "removed" (the pathways the masks take
        out, as `analysis.pathway_recovery` and the organism reports compare them). The two differ:
        masks that keep most heads share most kept heads even when they remove different ones."""
        a, b = self._set_pair(other, heads)
        union = (a | b).sum().item()
        return 1.0 if union == 0 else (a & b).sum().item() / union

    def expected_jaccard(self, other: HeadMask, heads: HeadSet = "kept") -> float:
        """The Jaccard expected for two random sets of the same sizes as the masks' `heads`
        (`random_jaccard`, Table 5's chance level)."""
        a, b = self._set_pair(other, heads)
        return random_jaccard(int(a.sum().item()), int(b.sum().item()), self.n_total)

    def recall(self, other: HeadMask) -> float:
        """Fraction of the smaller mask's kept heads that the other mask also keeps."""
        a, b = self._set_pair(other, "kept")
        smaller = min(a.sum().item(), b.sum().item())
        return 1.0 if smaller == 0 else (a & b).sum().item() / smaller

    # ----------------------------------------------------------------- compatibility
    def check_model(
        self, model: Any, *, allow_other_weights: bool = False, allow_other_name: bool | None = None
    ) -> None:
        """Raise ValueError unless this mask fits `model` (a TransformerBridge or a `ModelFingerprint`).

        The mask must match the model's shape and structure and, when both fingerprints carry a
        content hash, its weights: the same checkpoint loaded through any path, name or dtype is
        accepted, other weights are refused. `allow_other_weights=True` accepts any model of the
        same structure: the paper's "mask of another model" setting (base and instruct twins).
        A mask without a hash (an older file) is checked on structure only, with an
        `UnverifiedModelWarning`. `allow_other_name` is the former name of `allow_other_weights`.
        """
        allow = _allow_other_weights(allow_other_weights, allow_other_name)
        target = _fingerprint_of(model, content=not allow)
        if target is None:
            raise TypeError(f"model must be a TransformerBridge or a ModelFingerprint, got {describe(model)}")
        if (target.n_layers, target.n_heads) != tuple(self.values.shape):
            raise ValueError(
                f"mask shape {list(self.values.shape)} does not fit model {target.name!r} with "
                f"{target.n_layers} layers x {target.n_heads} heads"
            )
        if self.model is None:
            return
        if self.model.structural() != target.structural():
            differences = self.model.describe_difference(replace(target, name=self.model.name))
            raise ValueError(
                f"mask was made for model {self.model.describe()}, whose structure differs from "
                f"{target.describe()} ({differences})"
            )
        if allow:
            return
        same = self.model.same_weights(target)
        if same is None:
            if self.model.content_hash is None and target.content_hash is not None:
                warn(
                    f"mask for {self.model.describe()} carries no weights hash (written by an older version), "
                    "so only its structure was checked; save it again to record the hash",
                    UnverifiedModelWarning,
                )
            return
        if not same:
            raise ValueError(
                f"mask was made for other weights: {self.model.describe()}, not {target.describe()}; "
                "to use a mask of another model with the same structure (the paper's base/instruct swap) "
                f"pass allow_other_weights=True{_float16_note(model)}"
            )

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write `<path>` (safetensors with JSON metadata) atomically; returns the path.

        The same mask always gives the same bytes (sorted header and JSON keys, no timestamps), and
        the model is recorded by its portable name (never an absolute local path). A `path` that is
        a folder or lies in a folder that cannot be written is a ValueError; nothing is written then.
        """
        path = check_out_file(path, "path")
        if not path.suffix:
            path = check_out_file(path.with_suffix(".safetensors"), "path")
        tensors = {"values": self.values}
        if self.logits is not None:
            tensors["logits"] = self.logits
        if self.mlp_values is not None:
            tensors["mlp_values"] = self.mlp_values
        model = replace(self.model, name=portable_name(self.model.name)).to_dict() if self.model else None
        header = {
            "format": _FORMAT,
            "version": str(_FORMAT_VERSION),
            "model": json.dumps(model, sort_keys=True),
            "metadata": json.dumps(self.metadata, sort_keys=True),
        }
        header["checksum"] = content_checksum(tensors, header)  # deterministic: the bytes stay reproducible
        return write_safetensors(path, tensors, header)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        model: Any = None,
        *,
        allow_other_weights: bool = False,
        allow_other_name: bool | None = None,
        allow_missing_model: bool = False,
    ) -> HeadMask:
        """Read a mask written by `save`; with `model`, refuse one made for other weights (see `check_model`).

        A missing, truncated or corrupted file, a malformed header, a format version other than
        this one's (a file from a newer headsup_lens), invalid values, contents that do not match
        the file's checksum, `values` that disagree with `logits` (values must be
        1[sigmoid(logits) >= 0.5]) and a header without its `model` entry (unless
        `allow_missing_model=True`) are a ValueError that names the file. A file without a checksum
        (written by an older version) loads with an `UnverifiedMaskWarning`.
        """
        allow = _allow_other_weights(allow_other_weights, allow_other_name)
        path = Path(path)
        tensors, header = read_safetensors(path, "mask file")
        if header.get("format") != _FORMAT or "values" not in tensors:
            raise ValueError(f"{str(path)!r} is not a headsup_lens HeadMask file (format {header.get('format')!r})")
        _check_version(path, header)
        model_info = _header_json(path, header, "model", None)
        metadata = _header_json(path, header, "metadata", {})
        _check_checksum(path, tensors, header)  # a damaged file is named so before its values are judged
        try:
            mask = cls(
                tensors["values"],
                logits=tensors.get("logits"),
                model=ModelFingerprint.from_dict(model_info) if model_info else None,
                mlp_values=tensors.get("mlp_values"),
                metadata=metadata,
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"mask file {str(path)!r} holds an invalid mask: {error}") from error
        _check_model_entry(path, header, allow_missing_model)
        if model is not None:
            try:
                mask.check_model(model, allow_other_weights=allow)
            except ValueError as error:  # which of several files is another model's
                raise ValueError(f"mask file {str(path)!r}: {error}") from error
        return mask

    # ----------------------------------------------------------------- helpers
    def _derive(self, values: Tensor) -> HeadMask:
        return HeadMask(values, logits=None, model=self.model, mlp_values=self.mlp_values, metadata=dict(self.metadata))

    def _with_zeros(self, heads: list[Head]) -> HeadMask:
        values = self.values.clone()
        for layer, head in heads:
            values[layer, head] = 0.0
        return self._derive(values)

    def _check_heads(self, name: str, heads: Any) -> list[Head]:
        checked = []
        for head in check_sequence(name, heads, item="(layer, head) pair"):
            if isinstance(head, (str, bytes)) or not hasattr(head, "__len__") or len(head) != 2:
                raise TypeError(f"each entry of {name} must be a (layer, head) pair, got {describe(head)}")
            layer = check_int(f"the layer of {name} entry {describe(head)}", head[0])
            index = check_int(f"the head of {name} entry {describe(head)}", head[1])
            if not (0 <= layer < self.n_layers and 0 <= index < self.n_heads):
                raise ValueError(f"{name} entry ({layer}, {index}) is outside a {self.n_layers} x {self.n_heads} mask")
            checked.append((layer, index))
        return checked

    def _set_pair(self, other: HeadMask, heads: HeadSet) -> tuple[Tensor, Tensor]:
        """Both masks' kept (or removed) heads as boolean grids."""
        if not isinstance(other, HeadMask):
            raise TypeError(f"other must be a HeadMask, got {describe(other)}")
        check_choice("heads", heads, HEAD_SETS)
        if other.values.shape != self.values.shape:
            raise ValueError(f"masks of shapes {list(self.values.shape)} and {list(other.values.shape)} differ")
        kept = self.values > 0, other.values > 0
        return kept if heads == "kept" else (~kept[0], ~kept[1])

    def __repr__(self) -> str:
        name = self.model.name if self.model else "unknown model"
        return f"HeadMask({self.n_kept}/{self.n_total} heads kept, {self.n_layers}x{self.n_heads}, {name})"


def random_jaccard(size_a: int, size_b: int, n_total: int) -> float:
    """The Jaccard expected for two random sets of sizes a and b among N heads (Table 5's chance
    level): (ab/N) / (a + b - ab/N)."""
    n_total = check_int("n_total", n_total, minimum=1)
    size_a = check_int("size_a", size_a, minimum=0, maximum=n_total)
    size_b = check_int("size_b", size_b, minimum=0, maximum=n_total)
    overlap = size_a * size_b / n_total
    denominator = size_a + size_b - overlap
    return 1.0 if math.isclose(denominator, 0.0) else overlap / denominator


def _fingerprint_of(obj: Any, *, content: bool = True) -> ModelFingerprint | None:
    if isinstance(obj, ModelFingerprint):
        return obj
    if hasattr(obj, "cfg") and hasattr(obj, "original_model"):
        return fingerprint(obj, content=content)
    return None


def _float16_note(model: Any) -> str:
    """Why an fp16 model cast by hand does not hash as its checkpoint (see `weights_hash`)."""
    module = getattr(model, "original_model", None)
    first = next(module.parameters(), None) if isinstance(module, torch.nn.Module) else None
    if first is None or first.dtype != torch.float16:
        return ""
    return (
        " (the model's weights are float16, which hashes as its checkpoint only when load_model(..., "
        "dtype='fp16') loaded it; a model cast to float16 afterwards does not: load it with that dtype)"
    )


def _allow_other_weights(allow_other_weights: bool, allow_other_name: bool | None) -> bool:
    if allow_other_name is None:
        return allow_other_weights
    warn("allow_other_name is now called allow_other_weights", DeprecationWarning)
    return allow_other_weights or allow_other_name


def _as_float_tensor(name: str, value: Any) -> Tensor:
    """Tensors, arrays and nested lists of numbers as a detached float32 CPU tensor."""
    if not isinstance(value, Tensor):
        if isinstance(value, (str, bytes, dict)) or value is None:
            raise TypeError(f"{name} must be a tensor of numbers, got {describe(value)}")
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"{name} must be a tensor of numbers, got {describe(value)} ({error})") from error
    return check_tensor(name, value).detach().to(device="cpu", dtype=torch.float32)


def _check_mask_shape(shape: Any) -> tuple[int, int]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (tuple, list, torch.Size)) or len(shape) != 2:
        raise TypeError(
            "model_or_shape must be a TransformerBridge, a ModelFingerprint or an (n_layers, n_heads) pair, "
            f"got {describe(shape)}"
        )
    return check_int("n_layers", shape[0], minimum=1), check_int("n_heads", shape[1], minimum=1)


def _check_metadata(metadata: Any) -> dict[str, Any]:
    """Metadata is saved as JSON: a dict with string keys at every level and JSON values (no silent
    str()); it is kept as the file will give it back (tuples as lists), so a saved mask loads equal."""
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, got {describe(metadata)}")
    _check_json("metadata", metadata)
    return json.loads(json.dumps(metadata, sort_keys=True))


def _check_json(where: str, value: Any) -> None:
    """`value` survives a JSON round trip: dicts with string keys, lists, tuples, strings, numbers, bools, None."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} keys must be strings (JSON would turn {describe(key)} into a string), got {describe(key)}"
                )
            _check_json(f"{where}[{key!r}]", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_json(f"{where}[{i}]", item)
    elif not (value is None or isinstance(value, (str, bool, int, float))):
        raise TypeError(f"{where} must be JSON (numbers, strings, lists, dicts), got {describe(value)}")


def _check_values_follow_logits(values: Tensor, logits: Tensor) -> None:
    """`from_logits`' rule, the one a saved file is checked against: values = 1[sigmoid(logits) >= 0.5]."""
    wrong = (logits >= 0).float() != values
    if bool(wrong.any()):
        layer, head = (int(i) for i in wrong.nonzero()[0])
        raise ValueError(
            f"values are inconsistent with logits: {int(wrong.sum())} of {values.numel()} values differ from "
            f"1[sigmoid(logits) >= 0.5] (first: values[{layer}, {head}] = {values[layer, head].item():g} for "
            f"logit {logits[layer, head].item():g}); a mask with logits is HeadMask.from_logits(logits), "
            "a soft or edited mask has logits=None"
        )


def _check_version(path: Path, header: dict[str, str]) -> None:
    version = header.get("version")
    if version != str(_FORMAT_VERSION):
        raise ValueError(
            f"mask file {str(path)!r} has format version {version!r}; this headsup_lens reads version "
            f"{_FORMAT_VERSION!r} only (a newer headsup_lens wrote the file, or it was altered): upgrade "
            "headsup_lens to read it"
        )


def _check_checksum(path: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> None:
    if "checksum" in header:
        if header["checksum"] != content_checksum(tensors, header):
            raise ValueError(
                f"mask file {str(path)!r} is damaged: its tensors or header do not match the checksum "
                "recorded when it was saved; train or save the mask again"
            )
    else:
        warn(
            f"mask file {str(path)!r} carries no checksum (written by an older version), so its contents "
            "could not be verified; save it again to add one",
            UnverifiedMaskWarning,
        )


def _check_model_entry(path: Path, header: dict[str, str], allow_missing_model: bool) -> None:
    if "model" not in header and not allow_missing_model:
        raise ValueError(
            f"mask file {str(path)!r} has no model entry in its header (every saved mask has one, null "
            "when made for no model): the file was altered; pass allow_missing_model=True to load it "
            "without a model check"
        )


def _header_json(path: Path, header: dict[str, str], key: str, default: Any) -> Any:
    if key not in header:
        return default
    try:
        return json.loads(header[key])
    except json.JSONDecodeError as error:
        raise ValueError(
            f"mask file {str(path)!r} has malformed JSON in its {key!r} header entry ({error}); "
            "the file is corrupted: save or train the mask again"
        ) from error


def shape_of(model_or_shape: Any, name: str = "model_or_shape") -> tuple[int, int]:
    """`(n_layers, n_heads)` of a model, a fingerprint or a shape (errors name the argument `name`)."""
    fp = _fingerprint_of(model_or_shape, content=False)  # the shape only: no weights hash
    if fp is not None:
        return fp.n_layers, fp.n_heads
    try:
        return _check_mask_shape(model_or_shape)
    except TypeError as error:
        raise TypeError(str(error).replace("model_or_shape", name)) from error


def _load_mask_first(value: object) -> str | None:
    if isinstance(value, (str, os.PathLike)):
        return f"read it first: hl.HeadMask.load({str(value)!r}, model)"
    return None


advise(HeadMask, _load_mask_first)  # a mask file's path where a HeadMask is wanted
