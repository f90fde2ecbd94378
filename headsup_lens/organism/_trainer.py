"""Train the organism from scratch through the TransformerBridge, planting one head pathway per task.

Each batch mixes three kinds of chat examples (all `<user> {x} <assistant> {y}<eos>`):
- instructed: `x` = an instruction phrasing with the word, `y` = the task's answer, all heads;
- planted: `x` = the bare word, `y` = task t's answer, with the planted set S_t removed;
- echo: `x` = the bare word, `y` = the word, all heads, or (at `random_removal_rate`) with random
  heads removed, including up to half of some S_t, so that only the (nearly) complete S_t switches.
Heads are removed with the project's own `value_gate`, one mask row per example, so the pathway the
model learns is exactly the one the toolkit's masks act on.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from transformers import LlamaConfig, LlamaForCausalLM

from .._io import OutputSet, atomic_write_json
from ..data import IGNORE_INDEX as IGNORE
from ..data._organism import eval_words, organism_task, train_words
from ..gates import value_gate
from ..models import char_tokenizer, encode, hf_model, load_model, pad_token_id, prompt_format
from ..training import StepCallback, check_finite_loss, run_steps
from ._config import OrganismConfig
from ._planting import Head, plant_head_sets, save_planted


@dataclass
class Example:
    """One training row before padding."""

    prompt: list[int]
    answer: list[int]  # answer tokens followed by the end-of-turn token(s)
    kind: str
    task: str | None  # the task answered (None for echo)
    removed: list[Head] = field(default_factory=list)


@dataclass
class Batch:
    """Right-padded rows with answer-only labels and one head mask per row."""

    tokens: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"]
    labels: Int[Tensor, "batch pos"]  # next-token targets at each position, IGNORE off the answer
    masks: Float[Tensor, "batch n_layers n_heads"]
    kinds: list[str]
    tasks: list[str | None]


def build_organism(config: OrganismConfig) -> TransformerBridge:
    """A freshly initialised Llama of the recipe, booted as a trainable TransformerBridge.

    Saved to a temporary directory and loaded with `load_model`, i.e. through the same path as any
    local model; parameters are then unfrozen for training.
    """

    tokenizer = char_tokenizer()
    hf_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.d_model,
        intermediate_size=config.d_mlp,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        head_dim=config.d_model // config.n_heads,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=cast(int, tokenizer.eos_token_id),  # the character tokenizer's: one id each
        pad_token_id=cast(int, tokenizer.pad_token_id),
    )
    torch.manual_seed(config.seed)
    llama = LlamaForCausalLM(hf_config)
    with tempfile.TemporaryDirectory() as tmp:
        llama.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        model = load_model(tmp, device=config.device, dtype="float32")
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model


class PlantingSampler:
    """Draws the training mixture; every row's token ids and head mask come from here."""

    def __init__(self, model: TransformerBridge, config: OrganismConfig, planted: dict[str, list[Head]]):
        self.config = config
        self.planted = planted
        self.n_layers, self.n_heads = model.cfg.n_layers, model.cfg.n_heads
        self.rng = random.Random(config.seed + 1)
        template = prompt_format(model)
        self.pad_id = pad_token_id(model)

        def ids(text: str) -> list[int]:
            return encode(model, text, add_bos=template.add_bos)

        limit = config.n_words
        self.all_words = list(train_words()[:limit] + eval_words()[:limit])
        # Planting only the training words left the lookup tasks (translate, antonym) at chance on
        # held-out words (the planted mode memorised per word), so by default every word is planted;
        # the held-out words stay held out from mask training (the Task split).
        self.planting_words = self.all_words if config.plant_eval_words else list(train_words()[:limit])
        self.task_weights = [organism_task(t).weight for t in config.tasks]
        self.prompt = {}  # (word, task | None, phrasing | None) -> prompt ids
        self.answer = {}  # (word, task | None) -> answer ids
        for word in self.all_words:
            self.prompt[word, None, None] = ids(template.format(word))
            self.answer[word, None] = ids(word + template.end_of_turn)
            for name in config.tasks:
                task = organism_task(name)
                self.answer[word, name] = ids(task.answer(word) + template.end_of_turn)
                for phrasing in range(len(task.instructions)):
                    self.prompt[word, name, phrasing] = ids(template.format(task.user_text(word, phrasing)))
        self.heads = [(l, h) for l in range(self.n_layers) for h in range(self.n_heads)]

    def example(self, kind: str) -> Example:
        rng, config = self.rng, self.config
        if kind == "instructed":
            task = rng.choices(config.tasks, self.task_weights)[0]
            word = rng.choice(self.all_words)
            phrasing = rng.randrange(len(organism_task(task).instructions))
            return Example(self.prompt[word, task, phrasing], self.answer[word, task], kind, task)
        if kind == "planted":
            task = rng.choices(config.tasks, self.task_weights)[0]
            word = rng.choice(self.planting_words)
            return Example(self.prompt[word, None, None], self.answer[word, task], kind, task, list(self.planted[task]))
        word = rng.choice(self.all_words)
        example = Example(self.prompt[word, None, None], self.answer[word, None], kind, None)
        if kind == "echo_removed":
            # Up to half of one planted set plus a few random heads: only a near-complete S_t switches.
            pathway = self.planted[rng.choice(config.tasks)]
            partial = rng.sample(pathway, rng.randint(1, max(1, len(pathway) // 2)))
            extra = rng.sample(self.heads, rng.randint(0, config.planted_size))
            removed = set(partial) | set(extra)
            for heads in self.planted.values():  # an echo row must never show a complete pathway
                if set(heads) <= removed:
                    removed.discard(rng.choice(heads))
            example.removed = sorted(removed)
        return example

    def kind(self) -> str:
        rng, config = self.rng, self.config
        if rng.random() < config.instructed_fraction:
            return "instructed"
        if rng.random() < config.planted_rate:
            return "planted"
        return "echo_removed" if rng.random() < config.random_removal_rate else "echo"

    def batch(self, size: int | None = None, kinds: list[str] | None = None) -> Batch:
        if kinds is None:
            kinds = [self.kind() for _ in range(size or self.config.batch_size)]
        return collate([self.example(kind) for kind in kinds], self.pad_id, self.n_layers, self.n_heads)

    def micro_batches(self) -> tuple[list[Batch], int]:
        """One step's examples, sorted by length and cut into `micro_batches` padded batches.

        Instructed rows are about twice as long as bare ones; padding each group only to its own
        longest row roughly halves the tokens a step computes. Returns the batches and the number
        of answer tokens of the whole step (the loss is the mean over them).
        """
        examples = [self.example(self.kind()) for _ in range(self.config.batch_size)]
        examples.sort(key=lambda e: len(e.prompt) + len(e.answer))
        n = min(self.config.micro_batches, len(examples))
        bounds = [round(i * len(examples) / n) for i in range(n + 1)]
        batches = [
            collate(examples[a:b], self.pad_id, self.n_layers, self.n_heads)
            for a, b in itertools.pairwise(bounds)
            if b > a
        ]
        return batches, sum(len(e.answer) for e in examples)


def collate(examples: list[Example], pad_id: int, n_layers: int, n_heads: int) -> Batch:
    """Right-pad rows (fine for a loss with an attention mask) and label the answer tokens only."""
    width = max(len(e.prompt) + len(e.answer) for e in examples)
    tokens = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    masks = torch.ones(len(examples), n_layers, n_heads)
    for i, e in enumerate(examples):
        row = e.prompt + e.answer
        tokens[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
        # Position p predicts token p + 1: the answer tokens are predicted from len(prompt) - 1 on.
        labels[i, len(e.prompt) - 1 : len(row) - 1] = torch.tensor(e.answer)
        for layer, head in e.removed:
            masks[i, layer, head] = 0.0
    return Batch(tokens, attention, labels, masks, [e.kind for e in examples], [e.task for e in examples])


def batch_loss(model: TransformerBridge, batch: Batch, reduction: str = "mean") -> tuple[Tensor, Tensor]:
    """Answer cross-entropy (`reduction` over answer tokens), and per-row exact match.

    Runs the model under `value_gate` with the batch's per-row masks (`blocks.L.attn.hook_z`).
    A row matches when every answer token is the argmax: teacher-forced exact match equals
    greedy-generation exact match for the same prompt.
    """
    device = model.cfg.device
    with value_gate(model, batch.masks.to(device)):
        logits = model(batch.tokens.to(device), attention_mask=batch.attention_mask.to(device))
    labels = batch.labels.to(device)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction=reduction)
    answered = labels != IGNORE
    hits = (logits.argmax(-1) == labels) | ~answered
    return loss, hits.all(dim=1)


@dataclass
class TrainedOrganism:
    """A trained organism: the `model`, its `planted` head sets (task -> `(layer, head)` list), the
    training `history` (one dict per step: `step`, `loss`, `lr`, probe accuracies every
    `probe_every` steps), the `config` it was trained with and `wall_time_s`.
    """

    model: TransformerBridge
    planted: dict[str, list[Head]]
    history: list[dict]
    config: OrganismConfig
    wall_time_s: float


def train_organism(
    config: OrganismConfig | None = None,
    output_dir: str | os.PathLike | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    callbacks: Sequence[StepCallback] = (),
) -> TrainedOrganism:
    """Train the organism with planted pathways; with `output_dir`, save it there (loadable by `load_model`).

    The saved directory holds the Hugging Face config, safetensors weights, the tokenizer
    (`save_pretrained`), `planted.json` (S_t per task) and `training.json` (recipe and history);
    with `config.checkpoint_every`, the organism so far is saved there every that many steps. The
    learning rate follows `config.lr_at` (the shared `warmup_cosine`); `log` gets a JSON line at
    every probe, `callbacks` a `StepEnd` after every step.
    """
    recipe = config or OrganismConfig()
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    start = time.perf_counter()
    model = build_organism(recipe)
    planted = plant_head_sets(
        recipe.tasks, model.cfg.n_layers, model.cfg.n_heads, recipe.planted_size, seed=recipe.seed
    )
    sampler = PlantingSampler(model, recipe, planted)
    probe = _probe_batch(sampler) if recipe.probe_every else None
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=recipe.lr, betas=(0.9, 0.95), weight_decay=recipe.weight_decay)
    history: list[dict] = []

    def step(s: int) -> dict:
        lr = recipe.lr_at(s)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batches, n_tokens = sampler.micro_batches()
        optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for batch in batches:
            part = batch_loss(model, batch, reduction="sum")[0] / n_tokens
            part.backward()
            loss += part.item()
        check_finite_loss(loss, s, recipe.tasks)
        torch.nn.utils.clip_grad_norm_(parameters, recipe.grad_clip)
        optimizer.step()
        record = {"step": s + 1, "loss": loss, "lr": lr}
        if probe is not None and ((s + 1) % recipe.probe_every == 0 or s + 1 == recipe.steps):
            record.update(probe_accuracy(model, probe))
            if log:
                log(json.dumps({**record, "elapsed_s": round(time.perf_counter() - start, 1)}))
        history.append(record)
        return {"loss": f"{loss:.3f}"}

    def checkpoint(done: int) -> None:
        if output_dir is not None and done < recipe.steps:  # the finished organism is saved once, below
            save_organism(TrainedOrganism(model, planted, history, recipe, time.perf_counter() - start), output_dir)

    run_steps(
        step,
        steps=recipe.steps,
        checkpoint_every=recipe.checkpoint_every,
        checkpoint=checkpoint if output_dir is not None else None,
        callbacks=callbacks,
        progress=progress,
        desc="organism",
    )
    model.eval()
    result = TrainedOrganism(model, planted, history, recipe, time.perf_counter() - start)
    if output_dir is not None:
        save_organism(result, output_dir)
    return result


def save_organism(result: TrainedOrganism, output_dir: str | os.PathLike) -> Path:
    """Write a trained organism as a Hugging Face directory plus `planted.json` and `training.json`."""
    out = Path(output_dir)
    model = result.model
    # Written to a staging folder first and moved in as one set: a crash leaves the old files intact.
    stage = OutputSet(out, "organism")
    hf_model(model).save_pretrained(stage.path)
    model.tokenizer.save_pretrained(stage.path)
    cfg = model.cfg
    save_planted(
        stage.path,
        result.planted,
        cfg.n_layers,
        cfg.n_heads,
        seed=result.config.seed,
        tasks=[f"organism/{t}" for t in result.planted],
    )
    atomic_write_json(
        stage.path / "training.json",
        {
            "config": asdict(result.config),
            "wall_time_s": round(result.wall_time_s, 1),
            "history": result.history,
        },
    )
    stage.commit()
    return out


def _probe_batch(sampler: PlantingSampler, n_words: int = 12) -> Batch:
    """Held-out words for each task: instructed, planted (S_t removed) and bare (all heads)."""
    template_examples: list[Example] = []
    words = sampler.all_words[-n_words:]
    for task in sampler.config.tasks:
        for word in words:
            answer = sampler.answer[word, task]
            template_examples.append(Example(sampler.prompt[word, task, 0], answer, "instructed", task))
            template_examples.append(
                Example(sampler.prompt[word, None, None], answer, "planted", task, list(sampler.planted[task]))
            )
            template_examples.append(Example(sampler.prompt[word, None, None], answer, "original", task))
    for word in words:
        template_examples.append(Example(sampler.prompt[word, None, None], sampler.answer[word, None], "echo", None))
    return collate(template_examples, sampler.pad_id, sampler.n_layers, sampler.n_heads)


@torch.no_grad()
def probe_accuracy(model: TransformerBridge, probe: Batch) -> dict[str, float]:
    """Teacher-forced exact-match accuracy per kind of probe row (equals greedy exact match)."""
    _, hits = batch_loss(model, probe)
    out = {}
    for kind in dict.fromkeys(probe.kinds):
        rows = [i for i, k in enumerate(probe.kinds) if k == kind]
        out[f"acc_{kind}"] = round(hits[rows].float().mean().item(), 3)
        per_task = {}
        for i in rows:
            per_task.setdefault(probe.tasks[i], []).append(hits[i].item())
        if len(per_task) > 1:
            out[f"min_{kind}"] = round(min(sum(v) / len(v) for v in per_task.values()), 3)
    return out
