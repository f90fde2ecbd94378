"""Supervised fine-tuning of the model's weights on task examples, with activation patterns taken
along the run (Zhao, Du et al., "SFT achieves rapid task adaption via alternating attention head
activation patterns").

Low-rank adapters come from `peft` (`inject_adapter_in_model`), injected into the bridge itself: the
bridge wraps every Hugging Face linear layer in a `LinearBridge` whose `_original_component` is the
`nn.Linear`, so the adapters target `…q_proj._original_component` etc. and the bridge's hooks
(`hook_pattern`, `hook_z`, the gates) see the adapted model.

The loop, the schedule, the batch order, run identities and resume states are the training core's
(`headsup_lens.training`: `run_steps`, `warmup_cosine`, `BatchSampler`, ...; run identities are
`headsup_lens.models.run_identity`'s).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import synchronizer
from .._io import OutputSet, atomic_write_json, atomic_write_text, locked_folder
from .._validate import check_batch_fits, check_out_dir, check_ranges
from ..analysis import activation_pattern
from ..data import Task, TaskBatch, collate, encode_pairs, tokenize_task
from ..evaluation import accuracy as task_accuracy
from ..gates._paths import forget_forwards
from ..masks._files import write_safetensors
from ..models import check_same_run, data_hash, model_device, pad_token_id, run_identity
from ..models._sharding import is_sharded
from ..objective import answer_nll, length_batches
from ..options import recipe_of
from ..training import (
    BatchSampler,
    StepCallback,
    check_finite_loss,
    load_state,
    run_steps,
    safe_name,
    save_state,
    warmup_cosine,
)

_STATE = "state.pt"
_RUN = "run.json"
_PATTERNS = "patterns"
_FRESH = "resume=False"
# Rows of one forward/backward pass: a step's gradient is accumulated over passes, so a batch of any
# size needs the memory of this many rows (a huge batch_size ran out of memory in one pass).
ROWS_PER_PASS = 256


@dataclass(frozen=True)
class FinetuneConfig:
    """Supervised fine-tuning hyper-parameters (AdamW, linear warm-up, cosine decay).

    The defaults are a small full fine-tuning; `FinetuneConfig.lora()` gives low-rank adapters.
    """

    steps: int = 200
    """Optimisation steps."""
    batch_size: int = 8
    """Examples per step, drawn from the pooled training splits of all tasks (a fresh permutation per epoch);
    a step runs in passes of at most `ROWS_PER_PASS` (256) rows whose gradients add up to the batch's."""
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
    progress: bool = field(default=True, metadata={"cmd": False})
    """Show a progress bar with the loss (the CLI's `--no-progress` hides every bar)."""

    @classmethod
    def lora(cls, **overrides) -> FinetuneConfig:
        """Low-rank adapters on the attention projections, r = 8, alpha = 16, lr 1e-3."""
        return cls(**{"method": "lora", "lr": 1e-3, **overrides})

    def __post_init__(self) -> None:
        """Lists as sorted tuples, every field in its range (NaN and infinities refused); the
        method's name is checked with the types (`Literal`)."""
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        object.__setattr__(self, "pattern_steps", tuple(sorted({int(s) for s in self.pattern_steps})))
        check_ranges(
            self,
            {
                "steps": self.steps > 0,
                "batch_size": self.batch_size > 0,
                "lr": self.lr > 0,
                "min_lr_ratio": 0 <= self.min_lr_ratio <= 1,
                "warmup_frac": 0 <= self.warmup_frac < 1,
                "weight_decay": self.weight_decay >= 0,
                "max_grad_norm": self.max_grad_norm >= 0,
                "lora_rank": self.lora_rank > 0,
                "lora_alpha": self.lora_alpha > 0,
                "lora_targets": bool(self.lora_targets),
                "pattern_steps": all(0 <= s <= self.steps for s in self.pattern_steps),
                "pattern_examples": self.pattern_examples > 0,
                "checkpoint_every": self.checkpoint_every >= 0,
            },
            {
                "steps": "> 0",
                "batch_size": "> 0",
                "lr": "> 0",
                "min_lr_ratio": "in [0, 1]",
                "warmup_frac": "in [0, 1)",
                "lora_rank": "> 0",
                "lora_alpha": "> 0",
                "lora_targets": "a non-empty list of layer names",
                "pattern_steps": "in [0, steps]",
                "pattern_examples": "> 0",
            },
        )

    def lr_at(self, step: int) -> float:
        """Linear warm-up to `lr` over the first `ceil(warmup_frac * steps)` steps, then cosine decay
        to `lr * min_lr_ratio` at the last step (`warmup_cosine`; step counts from 0)."""
        warmup = math.ceil(self.warmup_frac * self.steps)
        return warmup_cosine(step, steps=self.steps, warmup=warmup, peak=self.lr, floor=self.lr * self.min_lr_ratio)

    def recipe(self) -> dict:
        """The fields that determine the trained weights (what a resumed run must share)."""
        return recipe_of(self, ("checkpoint_every", "progress", "pattern_steps", "pattern_examples", "accuracy"))


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


def pattern_subset(task: Task, n: int, *, n_train: int | None = None) -> Task:
    """`task` with its eval split cut to the first `n` held-out pairs, and its training split to the
    first `n_train` pairs when given (unchanged otherwise)."""
    train = range(task.n_train if n_train is None else min(n_train, task.n_train))
    held = range(task.n_train, task.n_train + min(n, task.n_eval))
    keep = [*train, *held]
    shots = None if task.shots is None else tuple(task.shots[i] for i in keep)
    return dataclasses.replace(task, pairs=tuple(task.pairs[i] for i in keep), n_eval=len(held), shots=shots)


def _lora_layers(model: torch.nn.Module) -> list[tuple[str, Any]]:
    """(name, module) of every peft adapter layer in `model`."""
    from peft.tuners.tuners_utils import BaseTunerLayer  # deferred: peft is slow to import

    return [(name, module) for name, module in model.named_modules() if isinstance(module, BaseTunerLayer)]


def add_lora_(model: TransformerBridge, config: FinetuneConfig) -> list[Tensor]:
    """Inject peft LoRA adapters into the bridge's linear layers named in `config.lora_targets`;
    returns the adapter parameters (trainable, seeded by `config.seed`; B starts at zero, so the
    model's output is unchanged until the first update). A model that already carries adapters is
    a ValueError (`remove_lora_` takes them out)."""
    _check_no_lora(model)
    return _inject_lora(model, config)


def _check_no_lora(model: TransformerBridge) -> None:
    if _lora_layers(model):
        raise ValueError("the model already carries LoRA adapters; remove them first (remove_lora_) or load it afresh")


def _inject_lora(model: TransformerBridge, config: FinetuneConfig) -> list[Tensor]:
    """`add_lora_` on a model checked to carry no adapters (`finetune_` checks before any work)."""
    from peft import LoraConfig, inject_adapter_in_model  # deferred: peft is slow to import

    names = "|".join(map(str, config.lora_targets))
    # The bridge keeps each Hugging Face nn.Linear as `<name>._original_component` of a LinearBridge.
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,  # pyright: ignore[reportArgumentType] (peft annotates int; the scale alpha / r takes a float)
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
    forget_forwards(model)  # a stand-in built before holds the layers the adapters now wrap
    parameters: list[Tensor] = [p for name, p in model.named_parameters() if "lora_" in name]
    for p in parameters:
        p.requires_grad_(True)
    return parameters


def remove_lora_(model: TransformerBridge) -> int:
    """Take out every LoRA adapter `add_lora_` injected: each adapted layer is replaced by the linear
    layer it wraps (the adapters' update is dropped, the base weights are untouched). Returns the
    number of layers restored (0 for a model without adapters)."""
    layers = _lora_layers(model)
    for name, module in layers:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module.get_base_layer())
    if "peft_config" in vars(model):  # peft records its configs on the model it injected into
        del model.peft_config
    forget_forwards(model)  # and one built with the adapters holds them
    return len(layers)


def _check_tasks(tasks: list[Task], config: FinetuneConfig) -> None:
    """What a run needs from its tasks, checked before any work: distinct names, training pairs,
    held-out pairs for the patterns (always taken at the last step), instructions when instructed."""
    if not tasks:
        raise ValueError("no tasks to fine-tune on")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names must be distinct, got {names}")
    untrained = [f"{t.name!r} ({len(t.pairs)} pairs, n_eval={t.n_eval})" for t in tasks if t.n_train < 1]
    if untrained:
        raise ValueError(f"tasks {', '.join(untrained)} have no training pairs: every pair is held out")
    unheld = [f"{t.name!r} ({len(t.pairs)} pairs)" for t in tasks if t.n_eval < 1]
    if unheld:
        raise ValueError(
            f"tasks {', '.join(unheld)} have no held-out pairs for the activation patterns (taken at least "
            "at the last step, on the first pattern_examples of the eval split): give each task n_eval >= 1"
        )
    check_batch_fits(config.batch_size, sum(t.n_train for t in tasks), f"training pairs of {', '.join(names)}")
    if config.instructed:
        missing = [t.name for t in tasks if t.instruction is None]
        if missing:
            raise ValueError(f"instructed=True but tasks {missing} have no instruction")


class _Snapshot:
    """The caller's model as it was before fine-tuning: the weights that will train (a copy), every
    parameter's `requires_grad`, and no adapters. `restore` puts it back."""

    def __init__(self, model: TransformerBridge, copy_weights: bool) -> None:
        self.model = model
        self.parameters = list(model.parameters())  # the same objects after peft wraps their layers
        self.flags = [p.requires_grad for p in self.parameters]
        self.values = [p.detach().clone() for p in self.parameters] if copy_weights else None

    def restore(self) -> None:
        remove_lora_(self.model)
        with torch.no_grad():
            for p, value in zip(self.parameters, self.values or []):
                p.copy_(value)
        self.settle()

    def settle(self) -> None:
        """Give every original parameter its `requires_grad` back (a loaded model is frozen)."""
        for p, flag in zip(self.parameters, self.flags):
            p.requires_grad_(flag)


def finetune_(
    model: TransformerBridge,
    tasks: Sequence[Task],
    config: FinetuneConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = True,
    callbacks: Sequence[StepCallback] = (),
) -> FinetuneResult:
    """Supervised fine-tuning of `model` on the training splits of `tasks`; **the model changes in place**.

    The loss is the mean cross-entropy over the answer (and end-of-turn) tokens of each step's batch,
    in the model's prompt format (`encode_pairs`; instructed prompts when `config.instructed`), the
    objective of `answer_nll`. With `method="lora"`, peft adapters are injected into the bridge and
    only they train. At every step in `config.pattern_steps` (and the last), each task's activation
    pattern (`activation_pattern`, on its first `pattern_examples` held-out pairs) and, with
    `config.accuracy`, its greedy accuracy are recorded. `callbacks` get a `StepEnd` after each step.

    Everything is checked before the model is touched (the config's numbers, the tasks' splits, every
    example's tokens, a resumed folder's run). If the run fails midway (an error, a step that would
    leave non-finite weights, Ctrl-C), the model gets its weights back (adapters removed) before the
    error propagates.

    With `out_dir` (locked while the run writes: another process there is refused, `FolderInUse`),
    the trainable weights, the optimiser state, the history and the patterns so far are saved every
    `checkpoint_every` steps (`state.pt`, atomically), and a rerun with the same `out_dir` resumes
    from the latest state (the same weights as an uninterrupted run); a folder holding another run
    (another model, recipe or data) is refused unless `resume=False`, which starts afresh. The
    finished run's files are written as one set: `history.csv`, `accuracy.csv`,
    `patterns/step*.safetensors` and `run.json` (the run's identity: recipe, tasks, data hash, model
    fingerprint, version).
    """
    config = config or FinetuneConfig()
    tasks = list(tasks)
    if is_sharded(model):
        raise ValueError(
            "finetune_ changes weights, and a model sharded with FSDP keeps them frozen: load it without shard"
        )
    _check_tasks(tasks, config)
    if config.method == "lora":
        _check_no_lora(model)
    # Tokenise first: a bad pair (training or held out) fails before anything is trained or written.
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
    probe_batches = [tokenize_task(model, t, split="eval", instructed=config.instructed) for t in probes]
    identity = run_identity(model, recipe=config.recipe(), tasks=[t.name for t in tasks], data=data_hash(rows))
    run = _Finetuning(model, config, rows, probes, probe_batches, identity)
    if out_dir is None:
        return run.train(None, None, callbacks)
    out = check_out_dir(out_dir)
    with locked_folder(out):  # one writer per run folder: a second run there is refused at once
        state = _saved_state(out, identity) if resume else None
        return run.train(out, state, callbacks)


def _saved_state(out: Path, identity: dict) -> dict | None:
    """The resume state in `out` (None when there is none), refused when `out` holds another run."""
    if (out / _STATE).is_file():
        state = load_state(out / _STATE)
        check_same_run(state.get("identity", {}), identity, out, what="fine-tuning run", fresh=_FRESH)
        return state
    if (out / _RUN).is_file():  # a finished run whose state is gone: still not another model's folder
        check_same_run(json.loads((out / _RUN).read_text()), identity, out, what="fine-tuning run", fresh=_FRESH)
    return None


class _Finetuning:
    """One fine-tuning run on checked inputs: the optimisation, the patterns, the outputs."""

    def __init__(
        self,
        model: TransformerBridge,
        config: FinetuneConfig,
        rows: list,
        probes: list[Task],
        probe_batches: list[TaskBatch],
        identity: dict,
    ) -> None:
        self.model, self.config, self.rows, self.identity = model, config, rows, identity
        self.probes, self.probe_batches = probes, probe_batches
        self.names = [t.name for t in probes]
        self.sampler = BatchSampler(len(rows), config.batch_size, config.seed, "finetune")
        self.pad_id = pad_token_id(model)
        self.device = model_device(model)
        self.wanted = set(config.pattern_steps) | {config.steps}
        self.history: list[dict] = []
        self.patterns: dict[int, dict[str, Tensor]] = {}
        self.accuracy_rows: list[dict] = []

    def train(self, out: Path | None, state: dict | None, callbacks: Sequence[StepCallback]) -> FinetuneResult:
        config, model = self.config, self.model
        snapshot = _Snapshot(model, copy_weights=config.method == "full")
        try:
            if config.method == "lora":
                self.parameters = _inject_lora(model, config)
                self.trainable = {n: p for n, p in model.named_parameters() if "lora_" in n}
            else:
                self.parameters = list(model.parameters())
                for p in self.parameters:
                    p.requires_grad_(True)
                self.trainable = dict(model.named_parameters())
            self.optimizer = torch.optim.AdamW(self.parameters, lr=config.lr, weight_decay=config.weight_decay)
            start = self.restore(state) if state is not None else 0
            if start == 0 and 0 in self.wanted:
                self.record(0)
            run_steps(
                self.step,
                steps=config.steps,
                start=start,
                checkpoint_every=config.checkpoint_every,
                checkpoint=(lambda done: self.checkpoint(out, done)) if out is not None else None,
                callbacks=callbacks,
                progress=config.progress,
                desc=f"finetune ({config.method})",
                synchronize=synchronizer(self.device),
            )
            result = self.result()
            if out is not None:
                self.write(out, result)
        except BaseException:
            snapshot.restore()  # the caller's model as it was: no half-trained weights, no adapters
            raise
        snapshot.settle()  # the trained weights stay; the original parameters are frozen again as they were
        return result

    def restore(self, state: dict) -> int:
        """Continue from a saved state (checked to be this run's); the steps it has done."""
        with torch.no_grad():
            for name, value in state["weights"].items():
                self.trainable[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.history, self.accuracy_rows = state["history"], state["accuracy"]
        self.patterns = {int(step): dict(patterns) for step, patterns in state["patterns"].items()}
        return int(state["step"])

    def record(self, step: int) -> None:
        """The activation pattern (and accuracy) of every task's held-out examples after `step` steps."""
        if step in self.patterns:
            return
        config, model = self.config, self.model
        self.patterns[step] = {
            t.name: activation_pattern(model, batch) for t, batch in zip(self.probes, self.probe_batches)
        }
        if config.accuracy:
            with torch.no_grad():
                for t in self.probes:
                    accuracy = task_accuracy(model, t, instructed=config.instructed, max_new_tokens=t.max_new_tokens)
                    self.accuracy_rows.append({"step": step, "task": t.name, "accuracy": accuracy})

    def step(self, step: int) -> dict:
        config, model = self.config, self.model
        lr = config.lr_at(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch_rows = [self.rows[i] for i in self.sampler.batch(step)]
        n_tokens = sum(len(answer) for _, answer in batch_rows)
        self.optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        # Passes over rows of similar length give the one-pass gradient with less padding.
        for members in length_batches(model, batch_rows, max_rows=ROWS_PER_PASS):
            batch = collate([batch_rows[i] for i in members], pad_id=self.pad_id, device=self.device)
            nll, _ = answer_nll(model, batch)
            part = nll.sum() / n_tokens
            check_finite_loss(part, step, self.names)
            part.backward()
            loss += part.item()
        grads = [p.grad for p in self.parameters if p.grad is not None]
        if config.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.parameters, config.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm(grads)
        if not torch.isfinite(norm):
            raise ValueError(
                f"the gradient became {norm.item()} at step {step} (tasks {self.names}); the step is refused "
                "and the model's weights are restored"
            )
        self.optimizer.step()
        if not torch.stack([p.detach().isfinite().all() for p in self.trainable.values()]).all():
            raise ValueError(
                f"step {step} (learning rate {lr:g}) would leave non-finite weights; it is refused and the "
                "model's weights are restored: lower the learning rate"
            )
        self.history.append({"step": step + 1, "loss": loss, "lr": lr})
        if step + 1 in self.wanted:
            self.record(step + 1)
        return {"loss": f"{loss:.3f}"}

    def checkpoint(self, out: Path, step: int) -> None:
        """The resume state after `step` steps: trainable weights, optimiser, history and patterns."""
        state = {
            "step": step,
            "weights": {n: p.detach().cpu() for n, p in self.trainable.items()},
            "optimizer": self.optimizer.state_dict(),
            "history": self.history,
            "accuracy": self.accuracy_rows,
            "patterns": self.patterns,
            "identity": self.identity,
        }
        save_state(out / _STATE, state)

    def result(self) -> FinetuneResult:
        frame = pd.DataFrame(self.history, columns=["step", "loss", "lr"])
        table = pd.DataFrame(self.accuracy_rows, columns=["step", "task", "accuracy"]) if self.config.accuracy else None
        return FinetuneResult(self.model, frame, dict(sorted(self.patterns.items())), table)

    def write(self, out: Path, result: FinetuneResult) -> None:
        """The finished run's files, moved into `out` as one set (a crash leaves the previous set)."""
        stage = OutputSet(out, "finetune")
        atomic_write_text(stage.path / "history.csv", result.history.to_csv(index=False))
        if result.accuracy is not None:
            atomic_write_text(stage.path / "accuracy.csv", result.accuracy.to_csv(index=False))
        for step, patterns in result.patterns.items():
            write_safetensors(
                stage.path / _PATTERNS / f"step{step:07d}.safetensors",
                {safe_name(n): p.contiguous() for n, p in patterns.items()},
                {"step": str(step), "tasks": "\n".join(self.names)},
            )
        atomic_write_json(stage.path / _RUN, self.identity)
        stage.commit()
