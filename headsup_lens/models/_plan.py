"""How much memory each GPU needs to train masks on a model too large for one: FSDP2 over N GPUs
(`load_model(shard="fsdp")`) beside accelerate's layer placement (`load_model(device_map="auto")`).

One mask-training step of a global batch whose rows hold `tokens` tokens in all (`answers` of them
answer tokens), weights in `weight_bytes` bytes each (2: bf16):

- FSDP over N GPUs (on any number of machines): each GPU holds `1/N` of every weight, the weights of
  the unit it computes all-gathered, and the next unit's gathered ahead (FSDP2 overlaps that
  all-gather with the current unit's compute: two units at most), and the activations of its own
  rows only (`1/N` of the batch's tokens and answers):
  `peak = weights / N + 2 x largest unit + activations(tokens / N) + workspace(tokens / N, answers / N)`;
  every GPU computes all the time.
- `device_map="auto"` over G GPUs of one machine: each GPU holds the weights of its `L / G` layers
  and their activations for every row, and the GPU with the unembedding holds the step's workspace:
  `peak = weights / G + activations(tokens) / G + workspace(tokens, answers)`; the layers run in
  sequence, so one GPU computes at a time and the other `G - 1` wait.

Activations and workspace follow a `MemoryLaw` measured on real steps (`experiments/bench/memory.py`:
bytes of activations per token and layer `a d_model + b d_mlp`, workspace `c answers x vocabulary +
e tokens x d_mlp`).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder that decide its memory (a Llama-like layer: attention with grouped
    key/value heads, a gated MLP, two norms)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    vocab: int
    tied: bool = False

    def layer_parameters(self) -> int:
        """Parameters of one decoder layer."""
        attention = 2 * self.d_model * self.n_heads * self.d_head + 2 * self.d_model * self.n_kv_heads * self.d_head
        return attention + 3 * self.d_model * self.d_mlp + 2 * self.d_model

    def parameters(self) -> int:
        """Parameters of the whole model (embedding, layers, final norm, unembedding unless tied)."""
        embeddings = self.vocab * self.d_model * (1 if self.tied else 2)
        return embeddings + self.n_layers * self.layer_parameters() + self.d_model

    def largest_unit(self) -> int:
        """Parameters of the largest FSDP unit (a decoder layer, or the embedding or unembedding)."""
        return max(self.layer_parameters(), self.vocab * self.d_model)


# Llama-3.1's three sizes (their config.json files).
LLAMA_3_SHAPES = (
    ModelShape("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128_256),
    ModelShape("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128_256),
    ModelShape("Llama-3.1-405B", 126, 16384, 128, 8, 128, 53248, 128_256),
)


@dataclass(frozen=True)
class MemoryLaw:
    """Bytes of a mask-training step beyond the weights, per token and layer of the pass
    (`activation_model`, `activation_mlp`: activations = tokens x layers x (a d_model + b d_mlp)) and
    for the step (`workspace_answers`, `workspace_tokens`: workspace = c answers x vocabulary + e
    tokens x d_mlp), in the dtype measured (`experiments/bench/memory.py` fits them)."""

    activation_model: float
    activation_mlp: float
    workspace_answers: float
    workspace_tokens: float

    def activations(self, shape: ModelShape, tokens: float, layers: float) -> float:
        """Bytes of activations of `tokens` tokens over `layers` layers of `shape`."""
        return tokens * layers * (self.activation_model * shape.d_model + self.activation_mlp * shape.d_mlp)

    def workspace(self, shape: ModelShape, tokens: float, answers: float) -> float:
        """Bytes of a step's workspace over `tokens` tokens, `answers` of them answer tokens."""
        return self.workspace_answers * answers * shape.vocab + self.workspace_tokens * tokens * shape.d_mlp


def memory_plan(
    shape: ModelShape,
    law: MemoryLaw,
    *,
    gpus: int,
    machines: int = 1,
    tokens: float,
    answers: float,
    weight_bytes: int = 2,
) -> list[dict]:
    """Per-GPU peak memory (GiB) of one mask-training step of `shape` on `gpus` GPUs (in all, over
    `machines` machines): one row for FSDP and, on one machine, one for `device_map="auto"` (see the
    module's docstring), with the parts of the peak and how many GPUs compute at a time."""
    if gpus < 1 or machines < 1 or gpus % machines:
        raise ValueError(f"gpus ({gpus}) must be a positive multiple of machines ({machines})")
    weights = shape.parameters() * weight_bytes
    common = {"model": shape.name, "machines": machines, "gpus": gpus, "tokens": tokens, "answers": answers}
    rows = [
        {
            **common,
            "method": "fsdp",
            "weights_gib": weights / gpus / GIB,
            "gathered_gib": 2 * shape.largest_unit() * weight_bytes / GIB,  # also at one GPU: FSDP copies
            "activations_gib": law.activations(shape, tokens / gpus, float(shape.n_layers)) / GIB,
            "workspace_gib": law.workspace(shape, tokens / gpus, answers / gpus) / GIB,
            "computing": gpus,
        }
    ]
    if machines == 1:  # accelerate places layers on the GPUs of one machine
        rows.append(
            {
                **common,
                "method": "device_map",
                "weights_gib": weights / gpus / GIB,
                "gathered_gib": 0.0,
                "activations_gib": law.activations(shape, tokens, shape.n_layers / gpus) / GIB,
                "workspace_gib": law.workspace(shape, tokens, answers) / GIB,
                "computing": 1,
            }
        )
    for row in rows:
        row["peak_gib"] = row["weights_gib"] + row["gathered_gib"] + row["activations_gib"] + row["workspace_gib"]
    return rows
