"""`HeadMask`: which attention heads a model keeps (1), removes (0) or scales (in between)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from safetensors.torch import load_file, save_file
from torch import Tensor

from .._io import atomic_write
from ..models._loading import ModelFingerprint, fingerprint

Head = tuple[int, int]
_FORMAT_VERSION = 1


def check_finite(values: Tensor, what: str) -> None:
    if not torch.isfinite(values).all():
        bad = (~torch.isfinite(values)).nonzero()[:5].tolist()
        raise ValueError(f"{what} contains NaN or infinite values (first at {bad})")


@dataclass
class HeadMask:
    """A head mask `values[layer, head]` with the logits it was trained from and the model it fits.

    `values` are 1 (keep), 0 (remove) or in between (scale). `logits` are the trained real
    weights M; `sigmoid(logits)` is the paper's head weight. `mlp_values` is the optional
    per-layer MLP slot of the paper's appendix (off by default).
    """

    # Shapes are [n_layers, n_heads] (mlp_values: [n_layers]); they are left open in the annotations
    # because __post_init__ checks them and raises a ValueError that names the problem.
    values: Float[Tensor, "*shape"]
    logits: Float[Tensor, "*shape"] | None = None
    model: ModelFingerprint | None = None
    mlp_values: Float[Tensor, "*mlp_shape"] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.values = torch.as_tensor(self.values, dtype=torch.float32).detach().cpu()
        if self.values.ndim != 2:
            raise ValueError(f"mask values must be [n_layers, n_heads], got shape {tuple(self.values.shape)}")
        check_finite(self.values, "mask values")
        if (self.values < 0).any() or (self.values > 1).any():
            raise ValueError("mask values must lie in [0, 1]")
        if self.logits is not None:
            self.logits = torch.as_tensor(self.logits, dtype=torch.float32).detach().cpu()
            if self.logits.shape != self.values.shape:
                raise ValueError(
                    f"logits shape {tuple(self.logits.shape)} differs from values shape {tuple(self.values.shape)}"
                )
            check_finite(self.logits, "mask logits")
        if self.mlp_values is not None:
            self.mlp_values = torch.as_tensor(self.mlp_values, dtype=torch.float32).detach().cpu()
            if self.mlp_values.shape != (self.n_layers,):
                raise ValueError(f"mlp_values must be [n_layers]={self.n_layers}, got {tuple(self.mlp_values.shape)}")
        if self.model is not None and (self.model.n_layers, self.model.n_heads) != tuple(self.values.shape):
            raise ValueError(
                f"mask shape {tuple(self.values.shape)} does not match its model "
                f"({self.model.n_layers} layers x {self.model.n_heads} heads)"
            )

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_logits(
        cls, logits: Float[Tensor, "n_layers n_heads"], model: ModelFingerprint | None = None, **metadata: Any
    ) -> HeadMask:
        """The paper's final mask: keep a head where `sigmoid(logit) >= 0.5` (no noise)."""
        logits = torch.as_tensor(logits, dtype=torch.float32).detach().cpu()
        check_finite(logits, "mask logits")
        return cls((logits >= 0).float(), logits=logits, model=model, metadata=dict(metadata))

    @classmethod
    def full(cls, model_or_shape: Any) -> HeadMask:
        """All heads kept; accepts a model or an `(n_layers, n_heads)` shape."""
        fp = _fingerprint_of(model_or_shape)
        shape = (fp.n_layers, fp.n_heads) if fp else tuple(model_or_shape)
        return cls(torch.ones(shape), model=fp)

    @classmethod
    def from_heads(cls, removed: list[Head], model_or_shape: Any) -> HeadMask:
        """All heads kept except `removed`, a list of `(layer, head)`."""
        mask = cls.full(model_or_shape)
        return mask.without(removed)

    # ----------------------------------------------------------------- properties
    @property
    def n_layers(self) -> int:
        return self.values.shape[0]

    @property
    def n_heads(self) -> int:
        return self.values.shape[1]

    @property
    def n_total(self) -> int:
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
        return [tuple(h) for h in (self.values > 0).nonzero().tolist()]

    def removed_heads(self) -> list[Head]:
        return [tuple(h) for h in (self.values == 0).nonzero().tolist()]

    # ----------------------------------------------------------------- derived masks
    def binary(self) -> HeadMask:
        """1 where a head is kept (value > 0), else 0."""
        return self._derive((self.values > 0).float())

    def without(self, heads: list[Head]) -> HeadMask:
        """A copy with `heads` removed."""
        values = self.values.clone()
        for layer, head in heads:
            self._check_head(layer, head)
            values[layer, head] = 0.0
        return self._derive(values)

    def shuffled(self, seed: int = 0) -> HeadMask:
        """The paper's random-mask baseline: the same number of kept heads, at random places."""
        generator = torch.Generator().manual_seed(seed)
        permutation = torch.randperm(self.n_total, generator=generator)
        values = self.values.flatten()[permutation].reshape(self.values.shape)
        return HeadMask(values, model=self.model, metadata={**self.metadata, "shuffled_seed": seed})

    def removal_order(self) -> list[Head]:
        """Every head, in ascending order of weight (the order of the one-by-one removal sweep).

        Ties are broken by position (layer, then head), so the order is deterministic.
        """
        flat = self.weights.flatten()
        order = sorted(range(flat.numel()), key=lambda i: (flat[i].item(), i))
        return [divmod(i, self.n_heads) for i in order]

    # ----------------------------------------------------------------- similarity
    def jaccard(self, other: HeadMask) -> float:
        """|kept ∩ kept'| / |kept ∪ kept'| (1.0 when both keep nothing)."""
        a, b = self._kept_set_pair(other)
        union = (a | b).sum().item()
        return 1.0 if union == 0 else (a & b).sum().item() / union

    def expected_jaccard(self, other: HeadMask) -> float:
        """Expected Jaccard of two random masks with these sizes (PAPER.md §3)."""
        self._kept_set_pair(other)
        return expected_jaccard(self.n_kept, other.n_kept, self.n_total)

    def recall(self, other: HeadMask) -> float:
        """Fraction of the smaller mask's kept heads that the other mask also keeps."""
        a, b = self._kept_set_pair(other)
        smaller = min(a.sum().item(), b.sum().item())
        return 1.0 if smaller == 0 else (a & b).sum().item() / smaller

    # ----------------------------------------------------------------- compatibility
    def check_model(self, model: Any, *, allow_other_name: bool = True) -> None:
        """Raise ValueError unless this mask fits `model` (a TransformerBridge or fingerprint)."""
        target = _fingerprint_of(model)
        if target is None:
            raise ValueError(f"cannot check a mask against {type(model).__name__}")
        if (target.n_layers, target.n_heads) != tuple(self.values.shape):
            raise ValueError(
                f"mask shape {tuple(self.values.shape)} does not fit model {target.name!r} with "
                f"{target.n_layers} layers x {target.n_heads} heads"
            )
        if self.model is None:
            return
        same = self.model.structural() == target.structural()
        if not same or (not allow_other_name and self.model.name != target.name):
            raise ValueError(
                f"mask was made for model {self.model.name!r}, not {target.name!r} "
                f"({self.model.describe_difference(target)})"
            )

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write `<path>` (safetensors with JSON metadata) atomically; returns the path."""
        path = Path(path)
        if not path.suffix:
            path = path.with_suffix(".safetensors")
        tensors = {"values": self.values.contiguous()}
        if self.logits is not None:
            tensors["logits"] = self.logits.contiguous()
        if self.mlp_values is not None:
            tensors["mlp_values"] = self.mlp_values.contiguous()
        header = {
            "format": "headsup_lens.HeadMask",
            "version": str(_FORMAT_VERSION),
            "model": json.dumps(self.model.to_dict() if self.model else None),
            "metadata": json.dumps(self.metadata, default=str),
        }
        atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=header))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, model: Any = None, *, allow_other_name: bool = False) -> HeadMask:
        """Read a mask written by `save`; with `model`, refuse one made for another model."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no mask file at {path}")
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                header = handle.metadata() or {}
            tensors = load_file(str(path))
        except Exception as error:  # safetensors raises its own error types for corrupt files
            raise ValueError(f"{path} is not a readable safetensors mask file: {error}") from error
        if header.get("format") != "headsup_lens.HeadMask" or "values" not in tensors:
            raise ValueError(f"{path} is not a headsup_lens HeadMask file")
        model_info = json.loads(header.get("model", "null"))
        mask = cls(
            tensors["values"],
            logits=tensors.get("logits"),
            model=ModelFingerprint.from_dict(model_info) if model_info else None,
            mlp_values=tensors.get("mlp_values"),
            metadata=json.loads(header.get("metadata", "{}")),
        )
        if model is not None:
            mask.check_model(model, allow_other_name=allow_other_name)
        return mask

    # ----------------------------------------------------------------- helpers
    def _derive(self, values: Tensor) -> HeadMask:
        return HeadMask(values, logits=None, model=self.model, mlp_values=self.mlp_values, metadata=dict(self.metadata))

    def _check_head(self, layer: int, head: int) -> None:
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise ValueError(f"head ({layer}, {head}) is outside a {self.n_layers} x {self.n_heads} mask")

    def _kept_set_pair(self, other: HeadMask) -> tuple[Tensor, Tensor]:
        if other.values.shape != self.values.shape:
            raise ValueError(f"masks of shapes {tuple(self.values.shape)} and {tuple(other.values.shape)} differ")
        return self.values > 0, other.values > 0

    def __repr__(self) -> str:
        name = self.model.name if self.model else "unknown model"
        return f"HeadMask({self.n_kept}/{self.n_total} heads kept, {self.n_layers}x{self.n_heads}, {name})"


def expected_jaccard(size_a: int, size_b: int, n_total: int) -> float:
    """E[Jaccard] of random masks of sizes a, b among N heads: (ab/N) / (a + b - ab/N)."""
    if n_total <= 0:
        raise ValueError("n_total must be positive")
    overlap = size_a * size_b / n_total
    denominator = size_a + size_b - overlap
    return 1.0 if math.isclose(denominator, 0.0) else overlap / denominator


def _fingerprint_of(obj: Any) -> ModelFingerprint | None:
    if isinstance(obj, ModelFingerprint):
        return obj
    if hasattr(obj, "cfg") and hasattr(obj, "original_model"):
        return fingerprint(obj)
    return None
