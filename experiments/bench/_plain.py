"""What the benchmarks compare with and build on: models at real shapes, and the same work done in
plain `transformers` (the model's own Hugging Face class, its default attention, per-row head masks
multiplied into each `o_proj` input by forward pre-hooks: what a patched Hugging Face model does).

Plain `transformers` at two levels of care (the `versus` names of the tables):
- `plain-eager`: a hand-written greedy loop on the dynamic KV cache, rows dropped at their stop token,
  and the training step's passes run eagerly (`PlainModel.greedy`, `PlainModel.train_step`);
- at its best: `generate(..., cache_implementation="static")` with `torch.compile` (transformers
  compiles the decoding step itself, `mode="reduce-overhead"`, on a static cache allocated once per
  batch shape and reset between calls) and a loss pass compiled at a fixed width
  (`plain-static-compiled`, `PlainModel.generate_static`, `PlainModel.compiled_nll`); a fixed-shape
  training step (every row padded to the longest, one pass, frozen weights) compiled by
  `torch.compile(mode="reduce-overhead")` (`plain-compiled`) or captured by hand as a CUDA graph
  (`plain-captured`): `PlainModel.fixed_step`.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable
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

    def __init__(self, directory: str, device: torch.device, dtype: torch.dtype, backend: str = "inductor") -> None:
        from transformers import AutoModelForCausalLM

        self.hf = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device).eval().requires_grad_(False)
        config = self.hf.config
        self.d_head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.device = device
        self.masks: torch.Tensor | None = None  # [rows, n_layers, n_heads]
        self._caches: dict[tuple[int, int], object] = {}
        self._compiled_hidden: Callable | None = None
        self.backend = backend  # of torch.compile: inductor; aot_eager traces the same graphs, compiles nothing
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

    # ---------------------------------------------------------------- at its best
    def _compile_options(self) -> dict:
        """`torch.compile`'s settings: reduce-overhead (CUDA graphs of the compiled code) under inductor."""
        if self.backend == "inductor":
            return dict(mode="reduce-overhead", dynamic=False)
        return dict(backend=self.backend, dynamic=False)

    def _static_cache(self, rows: int, length: int):
        """A static KV cache of `rows` x `length` slots, allocated once per shape and reset before use
        (what one keeps to avoid recompiling: the decoding step's shapes follow the cache's)."""
        from transformers import StaticCache

        key = (rows, length)
        if key not in self._caches:
            self._caches[key] = StaticCache(config=self.hf.config, max_cache_len=length)
        cache = self._caches[key]
        cache.reset()
        return cache

    def generate_static(
        self,
        ids: torch.Tensor,
        attention: torch.Tensor | None,
        masks: torch.Tensor | None,
        new: int,
        stops: set[int],
        pad_id: int,
        length: int | None = None,
        first_logits: bool = False,
    ) -> tuple[list[list[int]], torch.Tensor | None]:
        """`generate(..., do_sample=False)` on a static cache of `length` slots (default: prompt and new
        tokens) with its decoding step compiled by transformers (`torch.compile`, reduce-overhead;
        forced on the CPU too, where it compiles without CUDA graphs); new tokens cut before the stop,
        and with `first_logits` the prompt pass's logits (float32, on the CPU)."""
        from transformers import CompileConfig

        compile_config = CompileConfig(**self._compile_options())
        compile_config._compile_all_devices = True  # the CPU's dry run compiles the same way
        self.masks = None if masks is None else masks.to(self.device)
        try:
            out = self.hf.generate(
                input_ids=ids,
                attention_mask=attention if attention is not None else torch.ones_like(ids),
                max_new_tokens=new,
                do_sample=False,
                eos_token_id=sorted(stops),
                pad_token_id=pad_id,
                past_key_values=self._static_cache(ids.shape[0], length or ids.shape[1] + new),
                compile_config=compile_config,
                return_dict_in_generate=first_logits,
                output_logits=first_logits,
            )
        finally:
            self.masks = None
        sequences = out.sequences if first_logits else out
        tokens = sequences[:, ids.shape[1] :].tolist()
        cut = [t[: next((i for i, x in enumerate(t) if x in stops), len(t))] for t in tokens]
        return cut, (out.logits[0].float().cpu() if first_logits else None)

    def _hidden(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        return self.hf.model(input_ids=ids, attention_mask=attention).last_hidden_state

    def compiled_nll(
        self, rows: list[tuple[list[int], list[int]]], pad_id: int, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`answer_nll` of `rows` (no gate) with the model's pass compiled (`torch.compile`,
        reduce-overhead) at a fixed `width`: batches of one size share one compilation."""
        if self._compiled_hidden is None:
            self._compiled_hidden = torch.compile(self._hidden, **self._compile_options())
        batch = collate(rows, pad_id=pad_id, device=self.device, width=width)
        hidden = self._compiled_hidden(batch.input_ids, batch.attention_mask)
        r, positions, targets = answer_positions(batch.labels)
        logits = self.hf.get_output_embeddings()(hidden[r, positions])
        return F.cross_entropy(logits.float(), targets, reduction="none"), r

    def fixed_step(
        self,
        rows: list[tuple[list[int], list[int]]],
        logits: torch.Tensor,
        noise: torch.Tensor,
        tau: float,
        pad_id: int,
        how: str,
    ) -> Callable[[], torch.Tensor]:
        """A mask-training step at fixed shapes, as a careful user writes one: every row of `rows`
        right-padded to the longest, one pass, straight-through masks from per-row `logits` and
        `noise`, the answer-only loss (each answer token's mean) and the mask gradient; the weights
        frozen. `how`: "compiled" (`torch.compile(mode="reduce-overhead")` of the forward, whose
        backward it compiles too), "captured" (forward and backward captured by hand as one CUDA graph
        and replayed; eager on the CPU) or "eager". Returns the step: it writes `logits.grad`."""
        batch = collate(rows, pad_id=pad_id, device=self.device)
        r, positions, targets = answer_positions(batch.labels)
        n_answers = targets.shape[0]
        lm_head = self.hf.get_output_embeddings()

        def loss(logits: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            soft = torch.sigmoid((logits + noise) / tau)
            self.masks = (soft >= 0.5).to(soft.dtype) - soft.detach() + soft
            hidden = self._hidden(batch.input_ids, batch.attention_mask)
            self.masks = None
            nll = F.cross_entropy(lm_head(hidden[r, positions]).float(), targets, reduction="none")
            return nll.sum() / n_answers

        if how == "compiled":
            compiled = torch.compile(loss, **self._compile_options())

            def step() -> torch.Tensor:
                logits.grad = None
                compiled(logits, noise).backward()
                return logits.grad

            return step
        grad = torch.zeros_like(logits)

        def eager() -> torch.Tensor:
            grad.copy_(torch.autograd.grad(loss(logits, noise), logits)[0])
            return grad

        if how == "eager" or self.device.type != "cuda":
            return eager
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: kernel selection and the allocator, outside the graph
                eager()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            eager()

        def replay() -> torch.Tensor:
            graph.replay()
            return grad

        return replay

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
