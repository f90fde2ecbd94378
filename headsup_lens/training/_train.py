"""Gumbel-sigmoid straight-through training of head masks (Sec. 3.2), one or many tasks at once."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens.model_bridge import TransformerBridge

from .. import __version__
from .._distributed import all_reduce_sum, rank_and_world, shard
from .._io import atomic_write, atomic_write_text, locked_folder
from .._typecheck import checked
from .._warnings import warn
from ..data import Task, collate, encode_pairs
from ..gates import gate_hooks
from ..masks import HeadMask
from ..masks._files import read_safetensors, write_safetensors
from ..models import fingerprint, pad_token_id, prompt_format
from ..objective import answer_nll, length_batches
from ._advice import TrainingAdvice, run_problems
from ._config import TrainConfig

_STATE = "state.pt"
_CHECKPOINTS = "checkpoints"


@checked
@dataclass
class TrainResult:
    """A trained mask (`mask.logits` are the final M) and one history row per step."""

    mask: HeadMask
    history: pd.DataFrame


def _stable_seed(*parts) -> int:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@checked
def safe_name(name: str) -> str:
    """A task name as a file name (`translation/en-zh` -> `translation__en-zh`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", name)


class _Sampler:
    """Batches of training indices: a fresh permutation per epoch, derived from (seed, task, epoch).

    Stateless in the step number, so a resumed run draws exactly the batches of an uninterrupted one.
    """

    def __init__(self, n: int, batch_size: int, seed: int, task: str) -> None:
        self.n, self.batch_size, self.seed, self.task = n, batch_size, seed, task
        self._epoch, self._order = -1, None

    def batch(self, step: int) -> list[int]:
        out = []
        for position in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, i = divmod(position, self.n)
            if epoch != self._epoch:
                generator = torch.Generator().manual_seed(_stable_seed(self.seed, self.task, "epoch", epoch))
                self._epoch, self._order = epoch, torch.randperm(self.n, generator=generator).tolist()
            out.append(self._order[i])
        return out


@checked
def left_tail_gumbel(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """G = log(E), E ~ Exp(1) (= log(-log U)): the paper's noise, drawn on the CPU for reproducibility."""
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
    return torch.log(-torch.log(uniform)).float()


@checked
def straight_through(logits: Tensor, noise: Tensor, tau: float) -> Tensor:
    """Hard 0/1 mask in the forward pass, the gradient of sigmoid((M + G) / tau) in the backward pass."""
    soft = torch.sigmoid((logits + noise) / tau)
    hard = (soft >= 0.5).to(soft.dtype)
    return hard - soft.detach() + soft


def task_loss_sums(
    model: TransformerBridge, batch, hooks: list, rows_task: Tensor, n_tasks: int
) -> tuple[Tensor, Tensor]:
    """`[n_tasks]` each: the summed answer-token cross-entropy of each task's rows in `batch`, and
    the number of those tokens."""
    nll, token_rows = answer_nll(model, batch, hooks)
    token_task = rows_task[token_rows]
    sums = torch.zeros(n_tasks, device=nll.device).index_add(0, token_task, nll)
    return sums, torch.bincount(token_task, minlength=n_tasks).to(sums.dtype)


def clip_per_task(parameters: list[Tensor], max_norm: float) -> None:
    """Clip each task's gradient (row k of every parameter) to norm `max_norm`, as a single-task
    run's optimiser clips its whole gradient (the Hugging Face Trainer's `max_grad_norm`)."""
    norms = torch.sqrt(sum(p.grad.flatten(1).double().pow(2).sum(1) for p in parameters))
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for p in parameters:
        p.grad.mul_(scale.to(p.grad.dtype).view(-1, *[1] * (p.grad.ndim - 1)))


def run_identity(config: TrainConfig, names: list[str], encoded: list, model: TransformerBridge) -> dict:
    """Everything that determines a run's result: the recipe, the tasks, a hash of the training
    token ids (data, instructions, prompt format and tokenizer together), the prompt format, the
    model and the library version. A resumed run must match it in every field."""

    digest = hashlib.sha256(repr(encoded).encode()).hexdigest()
    model_fp = fingerprint(model)  # by content: the name is informational only
    return {
        "recipe": config.recipe(),
        "tasks": names,
        "data": digest,
        "prompt_format": prompt_format(model).name,
        "model": [*model_fp.structural(), model_fp.content_hash],
        "version": __version__,
    }


def _identity_differences(saved: dict, current: dict) -> list[str]:
    differences = []
    for key in sorted(set(saved) | set(current)):
        if key == "recipe" and isinstance(saved.get(key), dict):
            keys = sorted(set(saved[key]) | set(current[key]))
            differences += [
                f"recipe.{k} ({saved[key].get(k)!r} there, {current[key].get(k)!r} here)"
                for k in keys
                if saved[key].get(k) != current[key].get(k)
            ]
        elif saved.get(key) != current.get(key):
            differences.append({"data": "training data (its content hash)", "model": "model"}.get(key, key))
    return differences


def _load_state(path: Path, device: torch.device) -> dict:
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # truncated or corrupted files raise several unpickling error types
        raise ValueError(
            f"the training checkpoint {path} cannot be read ({type(error).__name__}); it is damaged: "
            "start afresh (resume=False; CLI: --fresh)"
        ) from error


@checked
def resume_step(out_dir: str | os.PathLike) -> int | None:
    """The step a rerun with this `out_dir` resumes from (its last checkpoint), or None when the
    folder holds no checkpoint. A damaged checkpoint is a ValueError, as on resuming."""
    path = Path(out_dir) / _CHECKPOINTS / _STATE
    return int(_load_state(path, torch.device("cpu"))["step"]) if path.is_file() else None


@checked
def train_mask(
    model: TransformerBridge,
    task: Task,
    config: TrainConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = True,
    distributed: bool = False,
) -> TrainResult:
    """Learn which heads `model` keeps so that it performs `task` from the bare input.

    Trains logits M `[n_layers, n_heads]` (the model stays frozen) on the answer tokens of the
    task's training split, without instruction. With `out_dir`, the logits are saved every
    `config.checkpoint_every` steps (`checkpoints/logits_step*.safetensors`, the Fig. 3 trajectories)
    together with the optimiser and noise state, a rerun with the same `out_dir` resumes from the
    latest state, and the final `mask.safetensors` and `history.csv` are written (all atomically).
    With `distributed=True` (an initialised `torch.distributed` group, e.g. under `torchrun`), each
    rank computes a share of every step's batch rows and the gradients are summed: the same mask as
    one process with the same global batch; rank 0 writes the files. The run folder is locked
    while training: another process training into it is refused at once (`FolderInUse`).
    """
    return _train(model, [task], config, out_dir=out_dir, resume=resume, single=True, distributed=distributed)[
        task.name
    ]


@checked
def train_masks(
    model: TransformerBridge,
    tasks: Sequence[Task],
    config: TrainConfig | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    resume: bool = True,
    distributed: bool = False,
) -> dict[str, TrainResult]:
    """Train one mask per task simultaneously: each batch row carries its own task's mask.

    One forward pass serves every task (per-row masks at the gate); each task's batches, noise and
    initial logits depend only on (seed, task name), and the loss is the sum of the per-task means,
    so each mask gets the gradient it would get alone. Final masks go to `out_dir/masks/`.
    """
    return _train(model, list(tasks), config, out_dir=out_dir, resume=resume, single=False, distributed=distributed)


def _train(
    model: TransformerBridge,
    tasks: list[Task],
    config: TrainConfig | None,
    *,
    out_dir: str | os.PathLike | None,
    resume: bool,
    single: bool,
    distributed: bool = False,
    step_times: list[float] | None = None,
) -> dict[str, TrainResult]:
    """The training loop; `step_times`, when given, receives each step's wall time in seconds."""
    kwargs = dict(out_dir=out_dir, resume=resume, single=single, distributed=distributed, step_times=step_times)
    if out_dir is None or (distributed and rank_and_world(required=True)[0] != 0):
        return _train_in(model, tasks, config, **kwargs)
    with locked_folder(out_dir):  # a run folder has one writer: a second run there is refused at once
        return _train_in(model, tasks, config, **kwargs)


def _train_in(
    model: TransformerBridge,
    tasks: list[Task],
    config: TrainConfig | None,
    *,
    out_dir: str | os.PathLike | None,
    resume: bool,
    single: bool,
    distributed: bool = False,
    step_times: list[float] | None = None,
) -> dict[str, TrainResult]:
    config = config or TrainConfig()
    config.validate()
    if not tasks:
        raise ValueError("no tasks to train")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names must be distinct, got {names}")
    device = torch.device(model.cfg.device)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    model_fp = fingerprint(model)
    # Tokenise everything first: a bad pair fails before anything is trained or written.
    encoded = [
        encode_pairs(
            model,
            [t.pairs[i] for i in t.split_indices("train")],
            shots=[t.demonstrations(i) for i in t.split_indices("train")],
        )
        for t in tasks
    ]
    samplers = [_Sampler(len(rows), config.batch_size, config.seed, t.name) for rows, t in zip(encoded, tasks)]
    pad_id = pad_token_id(model)
    rank, world = rank_and_world(required=True) if distributed else (0, 1)
    mine = shard(len(tasks) * config.batch_size, rank, world)  # this rank's rows of every step's batch

    init = [torch.Generator().manual_seed(_stable_seed(config.seed, name, "init")) for name in names]
    logits = (
        torch.stack([config.init_mean + config.init_std * torch.randn(n_layers, n_heads, generator=g) for g in init])
        .to(device)
        .requires_grad_(True)
    )
    parameters = [logits]
    mlp_logits = None
    if config.mlp:
        mlp_logits = (
            torch.stack([config.init_mean + config.init_std * torch.randn(n_layers, generator=g) for g in init])
            .to(device)
            .requires_grad_(True)
        )
        parameters.append(mlp_logits)
    optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
    noise = [torch.Generator().manual_seed(_stable_seed(config.seed, name, "noise")) for name in names]
    history: list[dict] = []
    start = 0

    out = Path(out_dir) if out_dir is not None else None
    identity = run_identity(config, names, encoded, model)
    if out is not None and resume and (out / _CHECKPOINTS / _STATE).is_file():
        state = _load_state(out / _CHECKPOINTS / _STATE, device)
        differences = _identity_differences(state.get("identity", {}), identity)
        if differences:
            raise ValueError(
                f"{out} holds a training run that differs from this one in {', '.join(differences)}; "
                "resume only the same run, or start afresh (resume=False; CLI: --fresh) or in another folder"
            )
        with torch.no_grad():
            logits.copy_(state["logits"])
            if mlp_logits is not None:
                mlp_logits.copy_(state["mlp_logits"])
        optimizer.load_state_dict(state["optimizer"])
        for generator, rng in zip(noise, state["noise"]):
            generator.set_state(rng.cpu())
        history, start = state["history"], int(state["step"])

    rows_task = torch.arange(len(tasks)).repeat_interleave(config.batch_size).to(device)
    writer = out is not None and rank == 0
    bar = tqdm(
        range(start, config.steps),
        initial=start,
        total=config.steps,
        disable=not config.progress or rank > 0,
        desc=f"mask {names[0]}" if single else f"masks x{len(tasks)}",
        dynamic_ncols=True,
    )
    for step in bar:
        step_start = time.perf_counter()
        tau, lr = config.tau_at(step), config.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        rows = [encoded[k][i] for k, sampler in enumerate(samplers) for i in sampler.batch(step)][
            mine.start : mine.stop
        ]
        # Every rank draws the whole step's noise (the generators stay in step) and keeps its rows.
        shape = (config.batch_size, n_layers, n_heads)
        head_noise = torch.cat([left_tail_gumbel(shape, g) for g in noise])[mine.start : mine.stop].to(device)
        row_task = rows_task[mine.start : mine.stop]
        mlp_noise = None
        if mlp_logits is not None:
            mlp_noise = torch.cat([left_tail_gumbel((config.batch_size, n_layers), g) for g in noise])
            mlp_noise = mlp_noise[mine.start : mine.stop].to(device)
        # Each task's loss is the mean over all its answer tokens in the step (over every rank).
        counts = torch.zeros(len(tasks), device=device).index_add(
            0, row_task, torch.tensor([float(len(answer)) for _, answer in rows], device=device)
        )
        if world > 1:
            counts = all_reduce_sum(counts)
        counts = counts.clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        # Rows are independent (per-row masks and noise): passes over rows of similar length give
        # the same gradient with less padding; each pass's graph is freed after its backward.
        per_task = torch.zeros(len(tasks), device=device)
        for members in length_batches(model, rows):
            index = torch.tensor(members, device=device)
            mask = straight_through(logits[row_task[index]], head_noise[index], tau)
            mlp = None if mlp_noise is None else straight_through(mlp_logits[row_task[index]], mlp_noise[index], tau)
            sums, _ = task_loss_sums(
                model,
                collate([rows[i] for i in members], pad_id=pad_id, device=device),
                gate_hooks(model, mask, gate=config.gate, mlp=mlp),
                row_task[index],
                len(tasks),
            )
            part = sums / counts
            _check_finite(part.sum(), step, names)
            part.sum().backward()
            per_task += part.detach()
        if config.size_penalty and rank == 0:  # counted once over the ranks
            (config.size_penalty * torch.sigmoid(logits).sum()).backward()
        if world > 1:
            for parameter in parameters:
                parameter.grad = all_reduce_sum(parameter.grad)
            per_task = all_reduce_sum(per_task)
        if config.max_grad_norm > 0:
            clip_per_task(parameters, config.max_grad_norm)
        optimizer.step()
        kept = (logits.detach() >= 0).sum(dim=(1, 2)).tolist()
        losses = per_task.detach().tolist()
        for name, task_loss, n_kept in zip(names, losses, kept):
            history.append({"step": step + 1, "task": name, "loss": task_loss, "tau": tau, "lr": lr, "n_kept": n_kept})
        bar.set_postfix(loss=f"{sum(losses) / len(losses):.3f}", tau=f"{tau:.2f}", kept=kept[0] if single else kept)
        if step_times is not None:
            step_times.append(time.perf_counter() - step_start)
        done = step + 1
        if writer and (done == config.steps or (config.checkpoint_every and done % config.checkpoint_every == 0)):
            _checkpoint(out, done, logits, mlp_logits, optimizer, noise, history, identity, names)
    bar.close()

    results = {}
    frame = pd.DataFrame(history, columns=["step", "task", "loss", "tau", "lr", "n_kept"])
    for problem in run_problems(frame, n_layers * n_heads):
        warn(
            f"mask training of {problem.task!r}: {problem.problem}. With the paper's init and learning "
            "rate no head can switch off before ~400 steps: train longer or use TrainConfig.fast()",
            TrainingAdvice,
        )
    for k, task in enumerate(tasks):
        head = HeadMask.from_logits(
            logits[k].detach(),
            model=model_fp,
            task=task.name,
            gate=config.gate,
            steps=config.steps,
            seed=config.seed,
            init_mean=config.init_mean,
        )
        if mlp_logits is not None:
            head = HeadMask(
                head.values,
                logits=head.logits,
                model=model_fp,
                mlp_values=(mlp_logits[k].detach() >= 0).float(),
                metadata={**head.metadata, "mlp_logits": mlp_logits[k].detach().tolist()},
            )
        results[task.name] = TrainResult(head, frame[frame.task == task.name].reset_index(drop=True))
    if writer:
        for name, result in results.items():
            result.mask.save(out / "mask.safetensors" if single else out / "masks" / f"{safe_name(name)}.safetensors")
        atomic_write_text(out / "history.csv", frame.to_csv(index=False))
    return results


def _check_finite(loss: Tensor, step: int, names: list[str]) -> None:
    if not torch.isfinite(loss):
        raise ValueError(
            f"training loss became {loss.item()} at step {step} (tasks {names}); the model may "
            "overflow in its dtype (try dtype='float32') or the learning rate is too high"
        )


def _checkpoint(
    out: Path,
    step: int,
    logits: Tensor,
    mlp_logits: Tensor | None,
    optimizer,
    noise,
    history: list[dict],
    identity: dict,
    names: list[str],
) -> None:
    tensors = {"logits": logits.detach().cpu().contiguous()}
    if mlp_logits is not None:
        tensors["mlp_logits"] = mlp_logits.detach().cpu().contiguous()
    # The model each checkpoint belongs to (structure and weights hash): readers refuse another model's.
    meta = {"step": str(step), "tasks": "\n".join(names), "model": json.dumps(identity["model"])}
    folder = out / _CHECKPOINTS
    write_safetensors(folder / f"logits_step{step:07d}.safetensors", tensors, meta)
    state = {
        "step": step,
        "logits": logits.detach(),
        "mlp_logits": None if mlp_logits is None else mlp_logits.detach(),
        "optimizer": optimizer.state_dict(),
        "noise": [g.get_state() for g in noise],
        "history": history,
        "identity": identity,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(folder / _STATE, lambda tmp: tmp.write_bytes(buffer.getvalue()))


@checked
def load_trajectory(out_dir: str | os.PathLike, task: str | None = None) -> tuple[list[int], Tensor]:
    """The saved logits of a training run: steps and a tensor `[n_checkpoints, n_layers, n_heads]`.

    `sigmoid` of it gives the paper's Fig. 3 head-weight trajectories. `task` picks one task of a
    multi-task run (default: the only or first task).
    """
    files = sorted((Path(out_dir) / _CHECKPOINTS).glob("logits_step*.safetensors"))
    if not files:
        raise ValueError(f"no logits checkpoints under {Path(out_dir) / _CHECKPOINTS}")
    names = read_safetensors(files[0], "training checkpoint")[1].get("tasks", "").split("\n")
    index = 0 if task is None else (names.index(task) if task in names else -1)
    if index < 0:
        raise ValueError(f"task {task!r} is not in this run (tasks: {names})")
    steps = [int(f.stem.removeprefix("logits_step")) for f in files]
    return steps, torch.stack([read_safetensors(f, "training checkpoint")[0]["logits"][index] for f in files])
