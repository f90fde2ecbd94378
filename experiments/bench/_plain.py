"""What the benchmarks compare with and build on: models at real shapes, and the same work done in
plain `transformers` (the model's own Hugging Face class, its default attention, per-row head masks
multiplied into each `o_proj` input by forward pre-hooks: what a patched Hugging Face model does).
"""

from __future__ import annotations

import random
import string
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import headsup_lens as hl
from headsup_lens.data import Task, collate
from headsup_lens.models import random_llama_dir
from headsup_lens.objective import answer_positions

# Real models' shapes, built with random weights (character tokenizer: about one token per character).
SHAPES = {
    "qwen0.5b": dict(
        architecture="qwen2",
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        hidden_size=896,
        intermediate_size=4864,
        vocab_size=151_936,
        tie_word_embeddings=True,
    ),
    "qwen1.5b": dict(
        architecture="qwen2",
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        hidden_size=1536,
        intermediate_size=8960,
        vocab_size=151_936,
        tie_word_embeddings=True,
    ),
    "llama8b": dict(
        architecture="llama",
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        hidden_size=4096,
        intermediate_size=14336,
        vocab_size=128_256,
        rope_theta=500_000.0,
        tie_word_embeddings=False,
    ),
    # A tiny shape: the benchmark's own test runs every section on it, on the CPU.
    "tiny": dict(architecture="qwen2", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
}


def model_dir(name: str, scratch: Path, device: str | None = None, dtype: str | None = None) -> str:
    """A loadable source for `name`: a shape of `SHAPES` (random weights, saved under `scratch`), or
    anything `load_model` takes (`smollm2`, `organism`, a directory). On a GPU the random weights
    are drawn there, in the model's dtype (an 8B model in fp32 on the CPU would take minutes)."""
    if name not in SHAPES:
        return name
    if device is None or not device.startswith("cuda"):
        return str(random_llama_dir(scratch / name, **SHAPES[name]))
    return str(random_dir_on_gpu(scratch / name, device, dtype or "bf16", **SHAPES[name]))


def random_dir_on_gpu(path: Path, device: str, dtype: str, architecture: str, **settings) -> Path:
    """Random weights at a shape, drawn on `device` in `dtype`, saved with a character tokenizer."""
    import transformers

    from headsup_lens.models import char_tokenizer

    tokenizer = char_tokenizer()
    kind = {"llama": "Llama", "qwen2": "Qwen2"}[architecture]
    config = getattr(transformers, f"{kind}Config")(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        max_position_embeddings=4096,
        **settings,
    )
    torch_dtype = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    with torch.device(device):
        model = getattr(transformers, f"{kind}ForCausalLM")._from_config(config, dtype=torch_dtype)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    del model
    torch.cuda.empty_cache()
    return path


def label(name: str) -> str:
    return f"{name} shape, random weights" if name in SHAPES else name


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Clock:
    wall: float  # seconds
    cpu: float  # CPU seconds of this process (all threads): steadier than wall time on a shared machine


def timed(fn, *args, device: torch.device, **kwargs) -> tuple[Clock, object]:
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    synchronize(device)
    return Clock(time.perf_counter() - wall, time.process_time() - cpu), out


def word_task(n: int = 400, seed: int = 0) -> Task:
    """A task that needs no data files: reverse a made-up word."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))) for _ in range(n)]
    return Task.from_pairs("reverse", [(w, w[::-1]) for w in words], n_eval=100)


class PlainModel:
    """The model's Hugging Face class loaded from `directory`, frozen, with a forward pre-hook on
    every `o_proj` that multiplies head h's slice of its input by `masks[row, layer, h]`."""

    def __init__(self, directory: str, device: torch.device, dtype: torch.dtype) -> None:
        from transformers import AutoModelForCausalLM

        self.hf = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device).eval().requires_grad_(False)
        config = self.hf.config
        self.d_head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.device = device
        self.masks: torch.Tensor | None = None  # [rows, n_layers, n_heads]
        for layer, block in enumerate(self.hf.model.layers):
            block.self_attn.o_proj.register_forward_pre_hook(self._gate(layer))

    def _gate(self, layer: int):
        def hook(module, args):
            if self.masks is None:
                return None
            x = args[0]
            gate = self.masks[:, layer].to(device=x.device, dtype=x.dtype).repeat_interleave(self.d_head, dim=-1)
            return (x * gate[:, None, :],)

        return hook

    @torch.no_grad()
    def greedy(
        self, ids: torch.Tensor, attention: torch.Tensor | None, masks: torch.Tensor | None, new: int, stops: set[int]
    ) -> tuple[list[list[int]], torch.Tensor]:
        """Greedy decoding with the KV cache, one logit per row and pass, rows dropped at a stop
        token (the work `greedy_generate` does); new tokens cut before the stop, first logits."""
        rows = ids.shape[0]
        self.masks = None if masks is None else masks.to(self.device)
        stop = torch.tensor(sorted(stops), device=self.device)
        active = torch.arange(rows, device=self.device)
        tokens: list[list[int]] = [[] for _ in range(rows)]
        kwargs = {} if attention is None else {"attention_mask": attention}
        if attention is not None:
            kwargs["position_ids"] = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.hf(ids, use_cache=True, logits_to_keep=1, **kwargs)
        first = out.logits[:, -1].float().cpu()
        running, next_ids = attention, out.logits[:, -1].argmax(-1)
        for step in range(new):
            if step:
                kwargs = {}
                if running is not None:
                    kwargs = {"attention_mask": running, "position_ids": running.cumsum(-1)[:, -1:] - 1}
                out = self.hf(
                    next_ids[:, None], past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1, **kwargs
                )
                next_ids = out.logits[:, -1].argmax(-1)
            for row, token in zip(active.tolist(), next_ids.tolist()):
                tokens[row].append(token)
            if running is not None:
                running = torch.cat([running, running.new_ones(len(active), 1)], dim=1)
            done = torch.isin(next_ids, stop)
            if step == new - 1 or bool(done.all()):
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)
                active, next_ids = active[keep], next_ids[keep]
                out.past_key_values.batch_select_indices(keep)
                running = None if running is None else running[keep]
                if self.masks is not None and self.masks.shape[0] > 1:
                    self.masks = self.masks[keep]
        self.masks = None
        return [t[: next((i for i, x in enumerate(t) if x in stops), len(t))] for t in tokens], first

    def answer_nll(
        self, rows: list[tuple[list[int], list[int]]], masks: torch.Tensor | None, pad_id: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per answer token of one right-padded pass over `rows`: cross-entropy (answer positions
        unembedded only; differentiable in `masks`, `[len(rows), n_layers, n_heads]` or None) and row."""
        batch = collate(rows, pad_id=pad_id, device=self.device)
        self.masks = masks
        try:
            hidden = self.hf.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        finally:
            self.masks = None
        r, positions, targets = answer_positions(batch.labels)
        logits = self.hf.get_output_embeddings()(hidden[r, positions])
        return F.cross_entropy(logits.float(), targets, reduction="none"), r

    def train_step(
        self,
        rows: list[tuple[list[int], list[int]]],
        groups: list[list[int]],
        logits: torch.Tensor,
        noise: torch.Tensor,
        tau: float,
        pad_id: int,
    ) -> None:
        """One mask-training step's forward and backward: straight-through masks from per-row logits
        and noise, answer-only loss, one backward per pass of similar-length rows (as `train_mask`)."""
        n_answers = sum(len(answer) for _, answer in rows)
        for group in groups:
            soft = torch.sigmoid((logits[group] + noise[group]) / tau)
            masks = (soft >= 0.5).to(soft.dtype) - soft.detach() + soft
            nll, _ = self.answer_nll([rows[i] for i in group], masks, pad_id)
            (nll.sum() / n_answers).backward()


def load(name: str, scratch: Path, device: str | None, dtype: str | None):
    """`(model, directory)`: the library's model of `name` and the Hugging Face directory it came from."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = hl.load_model(model_dir(name, scratch, device, dtype), device=device, dtype=dtype)
    return model, model.original_model.name_or_path
