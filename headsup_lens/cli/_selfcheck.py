"""`headsup selfcheck`: build a tiny model, gate it, and confirm the gates reproduce their references.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from ..options import Given, Options, check_counts
from ._registry import command


@dataclass(frozen=True)
class SelfCheckConfig(Options):
    """Options of `headsup selfcheck`."""

    seed: int = 0  # seed of the random tiny model and mask

    def __post_init__(self) -> None:
        check_counts(self, seed=0)


@command("selfcheck", SelfCheckConfig)
def run_selfcheck(config: SelfCheckConfig, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    import torch

    from ..gates import query_gate, value_gate
    from ..masks import HeadMask
    from ..models import load_model, random_llama_dir

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(random_llama_dir(tmp, seed=config.seed), device="cpu")
    torch.manual_seed(config.seed)
    tokens = torch.randint(4, model.cfg.d_vocab, (2, 8))
    mask = HeadMask((torch.rand(model.cfg.n_layers, model.cfg.n_heads) > 0.5).float())
    with torch.no_grad():
        original = model(tokens)
        with value_gate(model, HeadMask.full(model)):
            full = model(tokens)
        with value_gate(model, mask):
            gated = model(tokens)
        with query_gate(model, mask):
            queried = model(tokens)
    checks = {
        "full mask leaves logits unchanged": torch.equal(original, full),
        "value gate changes logits": not torch.allclose(original, gated),
        "query gate changes logits": not torch.allclose(original, queried),
    }
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1
