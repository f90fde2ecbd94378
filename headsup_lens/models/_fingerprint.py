"""Model identity: what a head mask must agree with before it may gate a model."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from transformer_lens.model_bridge import TransformerBridge


@dataclass(frozen=True)
class ModelFingerprint:
    """What a head mask must agree with before it may gate a model."""

    architecture: str
    n_layers: int
    n_heads: int
    d_head: int
    d_vocab: int
    name: str

    def structural(self) -> tuple:
        """Everything except the name: masks move between base and instruct twins of one architecture."""
        return (self.architecture, self.n_layers, self.n_heads, self.d_head, self.d_vocab)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelFingerprint:
        missing = {f for f in cls.__dataclass_fields__} - set(data)
        if missing:
            raise ValueError(f"model fingerprint is missing fields {sorted(missing)}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    def describe_difference(self, other: ModelFingerprint) -> str:
        diffs = [
            f"{k}: {getattr(self, k)!r} vs {getattr(other, k)!r}"
            for k in self.__dataclass_fields__
            if getattr(self, k) != getattr(other, k)
        ]
        return ", ".join(diffs)


def fingerprint(model: TransformerBridge) -> ModelFingerprint:
    """The fingerprint of a loaded model (read from its TransformerLens config)."""
    cfg = model.cfg
    return ModelFingerprint(
        architecture=str(getattr(cfg, "architecture", None) or type(model.original_model).__name__),
        n_layers=int(cfg.n_layers),
        n_heads=int(cfg.n_heads),
        d_head=int(cfg.d_head),
        d_vocab=int(cfg.d_vocab),
        name=str(getattr(cfg, "model_name", "") or ""),
    )
