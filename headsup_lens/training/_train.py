"""Gumbel-sigmoid straight-through training of head masks (Sec. 3.2), one or many tasks at once."""

from __future__ import annotations

import functools
import json
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from .._device import synchronizer, to_device
from .._distributed import all_reduce_sum, from_rank0, rank_and_world, shard
from .._io import atomic_write_text, locked_folder
from .._validate import check_batch_fits
from .._warnings import warn
from ..data import Task, collate, encode_pairs
from ..data._task import safe_name as safe_name
from ..gates import gate_kind
from ..gates._dispatch import training_gate_hooks
from ..gates._native import native_forward, pack_rows_asked
from ..masks import HeadMask
from ..masks._files import read_safetensors, write_safetensors
from ..models import (
    check_ranks_agree,
    check_same_run,
    data_hash,
    fingerprint,
    model_device,
    model_identity,
    pad_token_id,
    run_identity,
)
from ..models._sharding import every_rank, is_sharded, lockstep
from ..objective import answer_nll, length_batches
from ._advice import TrainingAdvice, run_problems
from ._config import TrainConfig
from ._graphed import FixedStep, captures_step
from ._gumbel import left_tail_gumbel, straight_through
from ._loop import (
    BatchSampler,
    StepCallback,
    check_finite_loss,
    load_state,
    run_steps,
    save_state,
    stable_seed,
)

_STATE = "state.pt"
_CHECKPOINTS = "checkpoints"


@dataclass
class TrainResult:
    """A trained mask (`mask.logits` are the final M) and one history row per step."""

    mask: HeadMask
    history: pd.DataFrame


def task_loss_sums(
    model: TransformerBridge, batch, hooks: list, rows_task: Tensor, n_tasks: int, *, checkpoint: bool = False
) -> tuple[Tensor, Tensor]:
    """`[n_tasks]` each: the summed answer-token cross-entropy of each task's rows in `batch`, and
    the number of those tokens (`checkpoint`: activation checkpointing, see `answer_logits`)."""
    nll, token_rows = answer_nll(model, batch, hooks, checkpoint=checkpoint)
    token_task = rows_task[token_rows]
    sums = torch.zeros(n_tasks, device=nll.device).index_add(0, token_task, nll)
    # index_add, not bincount: bincount reads its input's maximum back to the host on a GPU.
    return sums, torch.zeros_like(sums).index_add(0, token_task, torch.ones_like(nll))


def clip_per_task(parameters: list[Tensor], max_norm: float) -> None:
    """Clip each task's gradient (row k of every parameter) to norm `max_norm`, as a single-task
    run's optimiser clips its whole gradient (the Hugging Face Trainer's `max_grad_norm`)."""
    grads: list[Tensor] = []
    for p in parameters:
        if p.grad is None:
            raise ValueError("clip_per_task: a parameter has no gradient (call it after backward)")
        grads.append(p.grad)
    norms = torch.sqrt(functools.reduce(operator.add, [g.flatten(1).double().pow(2).sum(1) for g in grads]))
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype).view(-1, *[1] * (g.ndim - 1)))


def resume_step(
    out_dir: str | os.PathLike,
    model: TransformerBridge | None = None,
    tasks: Sequence[Task] = (),
    config: TrainConfig | None = None,
) -> int | None:
    """The step a rerun with this `out_dir` resumes from (its last checkpoint), or None when the
    folder holds no checkpoint. A damaged checkpoint is a ValueError, as on resuming. Given the
    run's `model`, `tasks` and `config`, a checkpoint of another run is the ValueError that training
    would raise, so that nothing announces a resume that will not happen."""
    path = Path(out_dir) / _CHECKPOINTS / _STATE
    if not path.is_file():
        return None
    state = load_state(path)
    if model is not None:
        tasks = list(tasks)
        identity = _identity(model, tasks, config or TrainConfig(), _encode(model, tasks))
        check_same_run(state.get("identity", {}), identity, out_dir)
    return int(state["step"])


def _encode(model: TransformerBridge, tasks: list[Task]) -> list:
    """Each task's training rows, tokenised (a bad pair fails before anything is trained or written)."""
    return [
        encode_pairs(
            model,
            [t.pairs[i] for i in t.split_indices("train")],
            shots=[t.demonstrations(i) for i in t.split_indices("train")],
        )
        for t in tasks
    ]


def _identity(model: TransformerBridge, tasks: list[Task], config: TrainConfig, encoded: list) -> dict:
    """What a mask-training run's result depends on (its resume state records it)."""
    return run_identity(model, recipe=config.recipe(), tasks=[t.name for t in tasks], data=data_hash(encoded))


@every_rank
def train_mask(
    model: TransformerBridge,
    task: Task,
    config: TrainConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = True,
    distributed: bool = False,
    callbacks: Sequence[StepCallback] = (),
) -> TrainResult:
    """Learn which heads `model` keeps so that it performs `task` from the bare input.

    Trains logits M `[n_layers, n_heads]` (the model stays frozen) on the answer tokens of the
    task's training split, without instruction. With `out_dir`, the logits are saved every
    `config.checkpoint_every` steps (`checkpoints/logits_step*.safetensors`, the Fig. 3 trajectories)
    together with the optimiser and noise state, a rerun with the same `out_dir` resumes from the
    latest state, and the final `mask.safetensors` and `history.csv` are written (all atomically).
    With `distributed=True` (an initialised `torch.distributed` group, e.g. under `torchrun`), each
    rank computes a share of every step's batch rows and the gradients are summed: the same mask as
    one process with the same global batch; rank 0 writes the files, and a rerun resumes with any
    number of ranks. On a model loaded with `shard="fsdp"` the run is always split so (every rank
    calls this; the captured step, `TrainConfig.cuda_graph`, does not apply). The run folder is locked
    while training: another process training into it is refused at once (`FolderInUse`).
    `callbacks` are called after every step with a `StepEnd` (its wall time, e.g. `StepTimer`).
    """
    return _train(
        model, [task], config, out_dir, resume=resume, distributed=distributed, callbacks=callbacks, single=True
    )[task.name]


@every_rank
def train_masks(
    model: TransformerBridge,
    tasks: Sequence[Task],
    config: TrainConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = True,
    distributed: bool = False,
    callbacks: Sequence[StepCallback] = (),
) -> dict[str, TrainResult]:
    """Train one mask per task simultaneously: each batch row carries its own task's mask.

    One forward pass serves every task (per-row masks at the gate); each task's batches, noise and
    initial logits depend only on (seed, task name), and the loss is the sum of the per-task means,
    so each mask gets the gradient it would get alone. Final masks go to `out_dir/masks/`.
    `callbacks` are called after every step with a `StepEnd` (see `train_mask`).
    """
    return _train(
        model, list(tasks), config, out_dir, resume=resume, distributed=distributed, callbacks=callbacks, single=False
    )


def _train(
    model: TransformerBridge,
    tasks: list[Task],
    config: TrainConfig | None,
    out_dir: str | os.PathLike | None,
    *,
    resume: bool,
    distributed: bool,
    callbacks: Sequence[StepCallback],
    single: bool,
) -> dict[str, TrainResult]:
    run = _MaskRun(model, tasks, config or TrainConfig(), single=single, distributed=distributed)
    if out_dir is None:
        return run.train(None, resume=resume, callbacks=callbacks)
    if run.rank != 0:  # resumes from the state rank 0 saved; only rank 0 writes (and locks)
        return run.train(Path(out_dir), resume=resume, callbacks=callbacks)
    with locked_folder(out_dir):  # a run folder has one writer: a second run there is refused at once
        return run.train(Path(out_dir), resume=resume, callbacks=callbacks)


class _MaskRun:
    """One mask-training run: its data, logits, optimiser and noise, and one step of it."""

    def __init__(
        self, model: TransformerBridge, tasks: list[Task], config: TrainConfig, *, single: bool, distributed: bool
    ) -> None:
        if not tasks:
            raise ValueError("no tasks to train")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be distinct, got {names}")
        if config.cuda_graph and is_sharded(model):
            raise ValueError(
                "cuda_graph=True: a captured step cannot hold the weight gathers of a model sharded with FSDP "
                "(load_model(shard=...)); leave cuda_graph at None (off there) or False"
            )
        if config.activation_checkpointing and (not gate_kind(config.gate).stand_in or native_forward(model) is None):
            raise ValueError(
                "activation_checkpointing needs the native forward pass: the value gate and no hook "
                "attached to the model"
            )
        empty = [t.name for t in tasks if t.n_train == 0]
        if empty:
            raise ValueError(f"tasks {empty} have no training pairs (every pair is held out: n_eval = len(pairs))")
        for t in tasks:  # each task's rows of a step come from its own training pairs
            check_batch_fits(config.batch_size, t.n_train, f"training pairs of {t.name}")
        self.model, self.tasks, self.config, self.names, self.single = model, tasks, config, names, single
        self.device = model_device(model)
        n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
        self.encoded = _encode(model, tasks)
        self.samplers = [
            BatchSampler(len(rows), config.batch_size, config.seed, t.name) for rows, t in zip(self.encoded, tasks)
        ]
        self.pad_id = pad_token_id(model)
        # A sharded model's ranks share every pass: its runs are always split over them.
        self.rank, self.world = rank_and_world(required=True) if distributed or is_sharded(model) else (0, 1)
        self.together = lockstep(model)  # every rank must run as many passes (forward and backward)
        self.mine = shard(len(tasks) * config.batch_size, self.rank, self.world)  # this rank's rows of each batch

        init = [torch.Generator().manual_seed(stable_seed(config.seed, name, "init")) for name in names]
        self.logits = (
            torch.stack(
                [config.init_mean + config.init_std * torch.randn(n_layers, n_heads, generator=g) for g in init]
            )
            .to(self.device)
            .requires_grad_(True)
        )
        self.parameters = [self.logits]
        self.mlp_logits = None
        if config.mlp:
            self.mlp_logits = (
                torch.stack([config.init_mean + config.init_std * torch.randn(n_layers, generator=g) for g in init])
                .to(self.device)
                .requires_grad_(True)
            )
            self.parameters.append(self.mlp_logits)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=config.lr, weight_decay=config.weight_decay)
        self.noise = [torch.Generator().manual_seed(stable_seed(config.seed, name, "noise")) for name in names]
        self.rows_task = torch.arange(len(tasks)).repeat_interleave(config.batch_size)  # on the host, as the noise
        self.fixed = None
        if not is_sharded(model) and captures_step(model, config, self.device, self.encoded) and len(self.mine):
            self.fixed = FixedStep(
                model,
                self.rows_task[self.mine.start : self.mine.stop],
                self.encoded,
                self.parameters,
                self.pad_id,
                graph=self.device.type == "cuda",
                packed=pack_rows_asked() is True,  # a token budget, on request (`native_options(pack_rows=True)`)
            )
        self.history: list[dict] = []
        self.pending: list[tuple] = []  # steps whose losses are still on the device (see `flush`)
        self.postfix: dict = {}
        self.identity = _identity(model, tasks, config, self.encoded)
        if self.world > 1:  # before the first step: ranks on other tasks would sum unrelated gradients
            check_ranks_agree(self.identity)

    def train(self, out: Path | None, *, resume: bool, callbacks: Sequence[StepCallback]) -> dict[str, TrainResult]:
        config, names = self.config, self.names
        start = 0
        if out is not None and resume:
            state = self.saved_state(out / _CHECKPOINTS / _STATE)
            if state is not None:
                start = self.restore(state, out)
        writer = out is not None and self.rank == 0
        run_steps(
            self.step,
            steps=config.steps,
            start=start,
            checkpoint_every=config.checkpoint_every,
            checkpoint=functools.partial(self.checkpoint, out) if writer and out is not None else None,
            # One process saves where it stops; the ranks of a job stop where a signal lands (in lockstep).
            on_interrupt=functools.partial(self.checkpoint, out, trajectory=False)
            if writer and out is not None and self.world == 1
            else None,
            callbacks=callbacks,
            progress=config.progress and self.rank == 0,
            desc=f"mask {names[0]}" if self.single else f"masks x{len(self.tasks)}",
            synchronize=synchronizer(self.device),
        )
        return self.results(out if writer else None)

    def saved_state(self, path: Path) -> dict | None:
        """The resume state at `path`, or None when there is none. Over several ranks rank 0 reads it
        and sends it to the others: every rank resumes alike, and ranks on other machines need no
        shared folder (any number of ranks resumes any run: the state holds no rank's share).

        The state is read onto the CPU: `load_state_dict` moves the optimiser's moments to the
        logits' device and leaves AdamW's step counters on the host, where its non-capturable step
        reads them (on a GPU a counter there would be read back at every step)."""
        if self.world > 1:
            return from_rank0(lambda: load_state(path) if path.is_file() else None)
        return load_state(path) if path.is_file() else None

    def restore(self, state: dict, out: Path) -> int:
        """Take over a saved state of `out` (refused when it is another run); the steps it has done."""
        check_same_run(state.get("identity", {}), self.identity, out)
        with torch.no_grad():
            self.logits.copy_(state["logits"])
            if self.mlp_logits is not None:
                self.mlp_logits.copy_(state["mlp_logits"])
        self.optimizer.load_state_dict(state["optimizer"])
        for generator, rng in zip(self.noise, state["noise"]):
            generator.set_state(rng.cpu())
        self.history = state["history"]
        return int(state["step"])

    def step(self, step: int) -> dict:
        config, model, device, mine = self.config, self.model, self.device, self.mine
        logits, mlp_logits, n_tasks = self.logits, self.mlp_logits, len(self.tasks)
        n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
        tau, lr = config.tau_at(step), config.lr_at(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        every = [self.encoded[k][i] for k, sampler in enumerate(self.samplers) for i in sampler.batch(step)]
        rows = every[mine.start : mine.stop]
        # The step's batch is prepared on the host and copied without waiting for the device
        # (`to_device`): the host queues step s+1 while the GPU still computes step s.
        # Every rank draws the whole step's noise (the generators stay in step) and keeps its rows.
        shape = (config.batch_size, n_layers, n_heads)
        head_noise = torch.cat([left_tail_gumbel(shape, g) for g in self.noise])[mine.start : mine.stop]
        row_task = self.rows_task[mine.start : mine.stop]
        mlp_noise = None
        if mlp_logits is not None:
            mlp_noise = torch.cat([left_tail_gumbel((config.batch_size, n_layers), g) for g in self.noise])
            mlp_noise = mlp_noise[mine.start : mine.stop]
        # Each task's loss is the mean over all its answer tokens in the step (over every rank).
        lengths = torch.tensor([float(len(answer)) for _, answer in rows])
        counts = to_device(torch.zeros(n_tasks).index_add(0, row_task, lengths), device)
        if self.world > 1:
            counts = all_reduce_sum(counts)
        counts = counts.clamp(min=1)
        self.optimizer.zero_grad(set_to_none=True)
        if self.fixed is not None:
            noise = [head_noise] if mlp_noise is None else [head_noise, mlp_noise]
            per_task = self.fixed(rows, noise, tau, counts)
        else:
            per_task = self.grouped_passes(rows, head_noise, mlp_noise, row_task, counts, tau)
            if self.together:
                self.idle_passes(every, len(length_batches(model, rows)), tau)
        if config.size_penalty and self.rank == 0:  # counted once over the ranks
            (config.size_penalty * torch.sigmoid(logits).sum()).backward()
        if self.world > 1:
            for parameter in self.parameters:
                if parameter.grad is not None:
                    parameter.grad = all_reduce_sum(parameter.grad)
            per_task = all_reduce_sum(per_task)
        if config.max_grad_norm > 0:
            clip_per_task(self.parameters, config.max_grad_norm)
        # A non-finite loss is found when the losses are read back (`flush`), which raises before
        # anything is written; until then the step's values stay on the device.
        self.optimizer.step()
        self.pending.append((step, tau, lr, per_task, (logits.detach() >= 0).sum(dim=(1, 2))))
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            self.flush()
        return self.postfix

    def grouped_passes(
        self, rows: list, head_noise: Tensor, mlp_noise: Tensor | None, row_task: Tensor, counts: Tensor, tau: float
    ) -> Tensor:
        """The step's gradient, accumulated into the parameters' `.grad`, by passes over rows of
        similar length; the per-task losses `[n_tasks]`, on the device."""
        config, model, device, logits, mlp_logits = self.config, self.model, self.device, self.logits, self.mlp_logits
        n_tasks = len(self.tasks)
        # Rows are independent (per-row masks and noise): passes over rows of similar length give
        # the same gradient with less padding; each pass's graph is freed after its backward.
        per_task = torch.zeros(n_tasks, device=device)
        for members in length_batches(model, rows):
            index = torch.tensor(members)
            tasks_of = to_device(row_task[index], device)
            mask = straight_through(logits[tasks_of], to_device(head_noise[index], device), tau)
            mlp = (
                None
                if mlp_noise is None or mlp_logits is None
                else straight_through(mlp_logits[tasks_of], to_device(mlp_noise[index], device), tau)
            )
            sums, _ = task_loss_sums(
                model,
                collate([rows[i] for i in members], pad_id=self.pad_id, device=device),
                training_gate_hooks(model, mask, config.gate, mlp),  # straight-through masks are 0/1
                tasks_of,
                n_tasks,
                checkpoint=config.activation_checkpointing,
            )
            part = sums / counts
            part.sum().backward()
            per_task += part.detach()
        return per_task

    def idle_passes(self, every: list, done: int, tau: float) -> None:
        """Passes that change nothing (their loss is multiplied by 0), so that this rank runs as many
        passes, forward and backward, as the rank with the most (a sharded model's passes are
        collectives). Every rank knows the whole step's rows, so the counts need no communication."""
        shares = [shard(len(every), r, self.world) for r in range(self.world)]
        most = max(len(length_batches(self.model, every[s.start : s.stop])) for s in shares)
        if done >= most:
            return
        config, model, device = self.config, self.model, self.device
        batch = collate([every[0]], pad_id=self.pad_id, device=device)
        zeros = torch.zeros(1, *self.logits.shape[1:], device=device)
        mask = straight_through(self.logits[:1], zeros, tau)
        mlp = None if self.mlp_logits is None else straight_through(self.mlp_logits[:1], zeros[..., 0], tau)
        hooks = training_gate_hooks(model, mask, config.gate, mlp)
        for _ in range(most - done):
            sums, _ = task_loss_sums(
                model,
                batch,
                hooks,
                torch.zeros(1, dtype=torch.long, device=device),
                1,
                checkpoint=config.activation_checkpointing,
            )
            (sums.sum() * 0.0).backward()

    def flush(self) -> None:
        """Read the pending steps' losses and heads kept back from the device (one synchronisation),
        append them to the history and refresh the progress bar's postfix; a ValueError naming the
        first step whose loss is not finite."""
        if not self.pending:
            return
        losses = torch.stack([p[3] for p in self.pending]).double()
        kept = torch.stack([p[4] for p in self.pending]).double()
        values, counts = torch.stack([losses, kept]).tolist()
        pending, self.pending = self.pending, []
        for (step, tau, lr, _, _), task_losses, task_kept in zip(pending, values, counts):
            check_finite_loss(sum(task_losses), step, self.names)
            for name, task_loss, n_kept in zip(self.names, task_losses, task_kept):
                self.history.append(
                    {"step": step + 1, "task": name, "loss": task_loss, "tau": tau, "lr": lr, "n_kept": int(n_kept)}
                )
        kept_now = [int(k) for k in task_kept]
        self.postfix = {
            "loss": f"{sum(task_losses) / len(task_losses):.3f}",
            "tau": f"{tau:.2f}",
            "kept": kept_now[0] if self.single else kept_now,
        }

    def checkpoint(self, out: Path, step: int, trajectory: bool = True) -> None:
        """The logits of `step` (the trajectory, unless not `trajectory`: a state saved where a run was
        interrupted is no point of it) and the resume state, each written atomically."""
        self.flush()
        tensors = {"logits": self.logits.detach().cpu().contiguous()}
        if self.mlp_logits is not None:
            tensors["mlp_logits"] = self.mlp_logits.detach().cpu().contiguous()
        folder = out / _CHECKPOINTS
        # The model each checkpoint belongs to (structure and weights hash): readers refuse another model's.
        meta = {
            "step": str(step),
            "tasks": "\n".join(self.names),
            "model": json.dumps(model_identity(self.identity["model"])),
        }
        if trajectory:
            write_safetensors(folder / f"logits_step{step:07d}.safetensors", tensors, meta)
        state = {
            "step": step,
            "logits": self.logits.detach(),
            "mlp_logits": None if self.mlp_logits is None else self.mlp_logits.detach(),
            "optimizer": self.optimizer.state_dict(),
            "noise": [g.get_state() for g in self.noise],
            "history": self.history,
            "identity": self.identity,
        }
        save_state(folder / _STATE, state)

    def results(self, out: Path | None) -> dict[str, TrainResult]:
        """The trained masks (written to `out` when given), with the run's advice as warnings."""
        self.flush()
        config, model = self.config, self.model
        model_fp = fingerprint(model)
        n_total = model.cfg.n_layers * model.cfg.n_heads
        frame = pd.DataFrame(self.history, columns=["step", "task", "loss", "tau", "lr", "n_kept"])
        for problem in run_problems(frame, n_total):
            warn(
                f"mask training of {problem.task!r}: {problem.problem}. With the paper's init and learning "
                "rate no head can switch off before ~400 steps: train longer or use TrainConfig.fast()",
                TrainingAdvice,
            )
        results = {}
        for k, task in enumerate(self.tasks):
            head = HeadMask.from_logits(
                self.logits[k].detach(),
                model=model_fp,
                task=task.name,
                gate=config.gate,
                steps=config.steps,
                batch_size=config.batch_size,  # with steps: the examples the mask saw (its budget)
                seed=config.seed,
                init_mean=config.init_mean,
            )
            if self.mlp_logits is not None:
                head = HeadMask(
                    head.values,
                    logits=head.logits,
                    model=model_fp,
                    mlp_values=(self.mlp_logits[k].detach() >= 0).float(),
                    metadata={**head.metadata, "mlp_logits": self.mlp_logits[k].detach().tolist()},
                )
            results[task.name] = TrainResult(head, frame.loc[frame.task == task.name].reset_index(drop=True))
        if out is not None:
            for name, result in results.items():
                path = out / "mask.safetensors" if self.single else out / "masks" / f"{safe_name(name)}.safetensors"
                result.mask.save(path)
            atomic_write_text(out / "history.csv", frame.to_csv(index=False))
        return results


def load_trajectory(out_dir: str | os.PathLike, task: str | None = None) -> tuple[list[int], Tensor]:
    """The saved logits of a training run: steps and a tensor `[n_checkpoints, n_layers, n_heads]`.

    `sigmoid` of it gives the paper's Fig. 3 head-weight trajectories. `task` picks one task of a
    multi-task run (default: the only or first task).
    """
    files = sorted((Path(out_dir) / _CHECKPOINTS).glob("logits_step*.safetensors"))
    if not files:
        raise ValueError(f"no logits checkpoints under {Path(out_dir) / _CHECKPOINTS}")
    read = [read_safetensors(f, "training checkpoint") for f in files]
    names = read[0][1].get("tasks", "").split("\n")
    index = 0 if task is None else (names.index(task) if task in names else -1)
    if index < 0:
        raise ValueError(f"task {task!r} is not in this run (tasks: {names})")
    # Checkpoints of another run (another model or task list) cannot be one trajectory: name them.
    kinds: dict[tuple, list[str]] = {}
    for path, (tensors, meta) in zip(files, read):
        kinds.setdefault((tuple(tensors["logits"].shape), meta.get("tasks", "")), []).append(path.name)
    if len(kinds) > 1:
        described = "; ".join(
            f"logits of shape {list(shape)} for tasks {tasks.split(chr(10))} in {', '.join(found[:3])}"
            + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            for (shape, tasks), found in kinds.items()
        )
        raise ValueError(
            f"the checkpoints under {Path(out_dir) / _CHECKPOINTS} come from different runs ({described}); "
            "keep the files of one run there"
        )
    steps = [int(f.stem.removeprefix("logits_step")) for f in files]
    return steps, torch.stack([tensors["logits"][index] for tensors, _ in read])
