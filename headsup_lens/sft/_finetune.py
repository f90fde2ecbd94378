"""Supervised fine-tuning of the model's weights on task examples, with activation patterns taken
along the run (Zhao, Du et al., "SFT achieves rapid task adaption via alternating attention head
activation patterns").

Low-rank adapters come from `peft` (`inject_adapter_in_model`), injected into the bridge itself: the
bridge wraps every Hugging Face linear layer in a `LinearBridge` whose `_original_component` is the
`nn.Linear`, so the adapters target `…q_proj._original_component` etc. and the bridge's hooks
(`hook_pattern`, `hook_z`, the gates) see the adapted model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens.model_bridge import TransformerBridge

from .._io import atomic_write, atomic_write_text
from .._typecheck import checked
from ..analysis import activation_pattern
from ..data import Task, collate, encode_pairs
from ..evaluation import accuracy as task_accuracy
from ..masks._files import read_safetensors, write_safetensors
from ..models import fingerprint, pad_token_id, prompt_format
from ..objective import answer_nll, length_batches
from ..training._train import _check_finite, _identity_differences, _load_state, _Sampler, safe_name

_STATE = "state.pt"
_PATTERNS = "patterns"


@checked
@dataclass
class FinetuneConfig:
    """Supervised fine-tuning hyper-parameters (AdamW, linear warm-up, cosine decay).

    The defaults are a small full fine-tuning; `FinetuneConfig.lora()` gives low-rank adapters.
    """

    steps: int = 200
    """Optimisation steps."""
    batch_size: int = 8
    """Examples per step, drawn from the pooled training splits of all tasks (a fresh permutation per epoch)."""
    lr: float = 2e-5
    """Peak learning rate, reached after the warm-up."""
    min_lr_ratio: float = 0.1
    """The cosine decays to `lr * min_lr_ratio`."""
    warmup_frac: float = 0.05
    """Fraction of the steps with a linear learning-rate warm-up."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Clip the gradient to this norm before each step; 0 turns clipping off."""
    method: Literal["full", "lora"] = "full"
    """"full": every weight is trained; "lora": low-rank adapters (peft), the base weights stay frozen."""
    lora_rank: int = 8
    """Rank r of the adapters (method="lora")."""
    lora_alpha: float = 16.0
    """Adapter scale alpha (the update is alpha / r * B A)."""
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Hugging Face names of the linear layers that get adapters (attention by default)."""
    instructed: bool = True
    """Train (and take patterns) on instructed prompts (the task's instruction template); False: bare inputs."""
    seed: int = 0
    """Seed of the batch order and of the adapters' initialisation."""
    pattern_steps: tuple[int, ...] = ()
    """Steps after which activation patterns are taken (0 = before any update); the final step always is."""
    pattern_examples: int = 32
    """Held-out examples per task (the first of its eval split) for patterns and accuracy."""
    accuracy: bool = True
    """Also measure greedy accuracy (the task's matcher) on those examples at every pattern step."""
    checkpoint_every: int = 50
    """Save the trainable weights and the resume state every this many steps; 0 saves only at the end."""
    progress: bool = True
    """Show a progress bar with the loss."""

    @classmethod
    def lora(cls, **overrides) -> FinetuneConfig:
        """Low-rank adapters on the attention projections, r = 8, alpha = 16, lr 1e-3."""
        return cls(**{"method": "lora", "lr": 1e-3, **overrides})

    def __post_init__(self) -> None:
        self.lora_targets = tuple(self.lora_targets)
        self.pattern_steps = tuple(sorted({int(s) for s in self.pattern_steps}))

    def validate(self) -> None:
        checks = {
            "steps must be positive": self.steps > 0,
            "batch_size must be positive": self.batch_size > 0,
            "lr must be positive": self.lr > 0,
            "min_lr_ratio must lie in [0, 1]": 0 <= self.min_lr_ratio <= 1,
            "warmup_frac must lie in [0, 1)": 0 <= self.warmup_frac < 1,
            "weight_decay and max_grad_norm must be >= 0": self.weight_decay >= 0 and self.max_grad_norm >= 0,
            "method must be 'full' or 'lora'": self.method in ("full", "lora"),
            "lora_rank must be positive": self.lora_rank > 0,
            "lora_targets must not be empty": bool(self.lora_targets),
            "pattern_steps must lie in [0, steps]": all(0 <= s <= self.steps for s in self.pattern_steps),
            "pattern_examples must be positive": self.pattern_examples > 0,
            "checkpoint_every must be >= 0": self.checkpoint_every >= 0,
        }
        bad = [message for message, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid FinetuneConfig: {'; '.join(bad)} ({self})")

    def lr_at(self, step: int) -> float:
        """Linear warm-up to `lr`, then cosine decay to `lr * min_lr_ratio` (step counts from 0)."""
        warmup = math.ceil(self.warmup_frac * self.steps)
        if step < warmup:
            return self.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, self.steps - warmup - 1)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine)

    def recipe(self) -> dict:
        """The fields that determine the trained weights (what a resumed run must share)."""
        return {
            k: v
            for k, v in asdict(self).items()
            if k not in ("checkpoint_every", "progress", "pattern_steps", "pattern_examples", "accuracy")
        }


@checked
@dataclass
class FinetuneResult:
    """The fine-tuned model (changed in place), the loss per step and the patterns along the run."""

    model: TransformerBridge
    history: pd.DataFrame
    """One row per step: step, loss (mean answer-token cross-entropy of the step's batch), lr."""
    patterns: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    """step -> task name -> activation pattern `[n_layers, n_heads]` (`activation_pattern`)."""
    accuracy: pd.DataFrame | None = None
    """One row per (pattern step, task): greedy accuracy on the pattern examples."""


@checked
def pattern_subset(task: Task, n: int, *, n_train: int | None = None) -> Task:
    """`task` with its eval split cut to the first `n` held-out pairs, and its training split to the
    first `n_train` pairs when given (unchanged otherwise)."""
    train = range(task.n_train if n_train is None else min(n_train, task.n_train))
    held = range(task.n_train, task.n_train + min(n, task.n_eval))
    keep = [*train, *held]
    shots = None if task.shots is None else tuple(task.shots[i] for i in keep)
    return dataclasses.replace(task, pairs=tuple(task.pairs[i] for i in keep), n_eval=len(held), shots=shots)


@checked
def add_lora_(model: TransformerBridge, config: FinetuneConfig) -> list[Tensor]:
    """Inject peft LoRA adapters into the bridge's linear layers named in `config.lora_targets`;
    returns the adapter parameters (trainable, seeded by `config.seed`; B starts at zero, so the
    model's output is unchanged until the first update)."""
    from peft import LoraConfig, inject_adapter_in_model

    names = "|".join(map(str, config.lora_targets))
    # The bridge keeps each Hugging Face nn.Linear as `<name>._original_component` of a LinearBridge.
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=rf".*\.({names})\._original_component",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        try:
            inject_adapter_in_model(lora, model)
        except ValueError as error:
            raise ValueError(
                f"no linear layer of this model matches lora_targets={config.lora_targets}: {error}"
            ) from error
    parameters = [p for name, p in model.named_parameters() if "lora_" in name]
    for p in parameters:
        p.requires_grad_(True)
    return parameters


def _trainable(model: TransformerBridge, config: FinetuneConfig) -> dict[str, Tensor]:
    """The weights a checkpoint saves: the adapters, or every parameter."""
    named = dict(model.named_parameters())
    return {n: p for n, p in named.items() if "lora_" in n} if config.method == "lora" else named


@checked
def finetune(
    model: TransformerBridge,
    tasks: Sequence[Task],
    config: FinetuneConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = True,
) -> FinetuneResult:
    """Supervised fine-tuning of `model` on the training splits of `tasks`; the model changes in place.

    The loss is the mean cross-entropy over the answer (and end-of-turn) tokens of each step's batch,
    in the model's prompt format (`encode_pairs`; instructed prompts when `config.instructed`), the
    objective of `answer_nll`. With `method="lora"`, peft adapters are injected into the bridge and
    only they train. At every step in `config.pattern_steps` (and the last), each task's activation
    pattern (`activation_pattern`, on its first `pattern_examples` held-out pairs) and, with
    `config.accuracy`, its greedy accuracy are recorded. With `out_dir`, the trainable weights, the
    optimiser state and the history are saved every `checkpoint_every` steps (`state.pt`), patterns
    to `patterns/step*.safetensors` and `history.csv` / `accuracy.csv` (all atomically), and a rerun
    with the same `out_dir` resumes from the latest state (the same weights as an uninterrupted run).
    """
    config = config or FinetuneConfig()
    config.validate()
    tasks = list(tasks)
    if not tasks:
        raise ValueError("no tasks to fine-tune on")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names must be distinct, got {names}")
    if config.instructed:
        missing = [t.name for t in tasks if t.instruction is None]
        if missing:
            raise ValueError(f"instructed=True but tasks {missing} have no instruction")
    device = torch.device(model.cfg.device)
    base_fp = fingerprint(model)
    # Tokenise first: a bad pair fails before anything is trained or written.
    rows = []
    for t in tasks:
        indices = t.split_indices("train")
        rows += encode_pairs(
            model,
            [t.pairs[i] for i in indices],
            instruction=t.instruction if config.instructed else None,
            shots=[t.demonstrations(i) for i in indices] if t.has_shots else None,
        )
    probes = [pattern_subset(t, config.pattern_examples) for t in tasks]
    sampler = _Sampler(len(rows), config.batch_size, config.seed, "finetune")
    pad_id = pad_token_id(model)

    if config.method == "lora":
        parameters = add_lora_(model, config)
    else:
        parameters = list(model.parameters())
        for p in parameters:
            p.requires_grad_(True)
    trainable = _trainable(model, config)
    optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
    identity = {
        "recipe": config.recipe(),
        "tasks": names,
        "data": hashlib.sha256(repr(rows).encode()).hexdigest(),
        "prompt_format": prompt_format(model).name,
        "model": [*base_fp.structural(), base_fp.content_hash],
    }
    history: list[dict] = []
    patterns: dict[int, dict[str, Tensor]] = {}
    accuracy_rows: list[dict] = []
    start = 0
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and resume and (out / _STATE).is_file():
        state = _load_state(out / _STATE, device)
        differences = _identity_differences(state.get("identity", {}), identity)
        if differences:
            raise ValueError(
                f"{out} holds a fine-tuning run that differs from this one in {', '.join(differences)}; "
                "resume only the same run, or start afresh (resume=False) or in another folder"
            )
        with torch.no_grad():
            for name, value in state["weights"].items():
                trainable[name].copy_(value)
        optimizer.load_state_dict(state["optimizer"])
        history, start = state["history"], int(state["step"])
        accuracy_rows = state["accuracy"]
        for file in sorted((out / _PATTERNS).glob("step*.safetensors")):
            step = int(file.stem.removeprefix("step"))
            if step <= start:
                tensors, meta = read_safetensors(file, "activation patterns")
                order = meta.get("tasks", "").split("\n")
                patterns[step] = {name: tensors[safe_name(name)] for name in order}

    def record(step: int) -> None:
        if step in patterns:
            return
        patterns[step] = {
            t.name: activation_pattern(model, t, split="eval", instructed=config.instructed) for t in probes
        }
        if config.accuracy:
            with torch.no_grad():
                for t in probes:
                    accuracy_rows.append(
                        {
                            "step": step,
                            "task": t.name,
                            "accuracy": task_accuracy(
                                model, t, instructed=config.instructed, max_new_tokens=t.max_new_tokens
                            ),
                        }
                    )
        if out is not None:
            write_safetensors(
                out / _PATTERNS / f"step{step:07d}.safetensors",
                {safe_name(n): p.contiguous() for n, p in patterns[step].items()},
                {"step": str(step), "tasks": "\n".join(names)},
            )

    wanted = set(config.pattern_steps) | {config.steps}
    try:
        if start == 0 and 0 in wanted:
            record(0)
        bar = tqdm(
            range(start, config.steps),
            initial=start,
            total=config.steps,
            disable=not config.progress,
            desc=f"finetune ({config.method})",
            dynamic_ncols=True,
        )
        for step in bar:
            lr = config.lr_at(step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch_rows = [rows[i] for i in sampler.batch(step)]
            n_tokens = sum(len(answer) for _, answer in batch_rows)
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            # Passes over rows of similar length give the one-pass gradient with less padding.
            for members in length_batches(model, batch_rows):
                batch = collate([batch_rows[i] for i in members], pad_id=pad_id, device=device)
                nll, _ = answer_nll(model, batch)
                part = nll.sum() / n_tokens
                _check_finite(part, step, names)
                part.backward()
                loss += part.item()
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm)
            optimizer.step()
            history.append({"step": step + 1, "loss": loss, "lr": lr})
            bar.set_postfix(loss=f"{loss:.3f}")
            done = step + 1
            if done in wanted:
                record(done)
            if out is not None and (
                done == config.steps or (config.checkpoint_every and done % config.checkpoint_every == 0)
            ):
                _save(out, done, trainable, optimizer, history, accuracy_rows, identity)
        bar.close()
    finally:
        if config.method == "full":
            for p in parameters:
                p.requires_grad_(False)  # the project's convention: a loaded model is frozen
    frame = pd.DataFrame(history, columns=["step", "loss", "lr"])
    table = pd.DataFrame(accuracy_rows, columns=["step", "task", "accuracy"]) if config.accuracy else None
    if out is not None:
        atomic_write_text(out / "history.csv", frame.to_csv(index=False))
        if table is not None:
            atomic_write_text(out / "accuracy.csv", table.to_csv(index=False))
    return FinetuneResult(model, frame, dict(sorted(patterns.items())), table)


def _save(
    out: Path,
    step: int,
    trainable: dict[str, Tensor],
    optimizer,
    history: list[dict],
    accuracy_rows: list[dict],
    identity: dict,
) -> None:
    state = {
        "step": step,
        "weights": {n: p.detach().cpu() for n, p in trainable.items()},
        "optimizer": optimizer.state_dict(),
        "history": history,
        "accuracy": accuracy_rows,
        "identity": identity,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(out / _STATE, lambda tmp: tmp.write_bytes(buffer.getvalue()))
