"""`headsup train`: learn head masks without instructions (several tasks train together).

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Collection
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from .._io import atomic_write_json
from .._validate import check_batch_fits
from ..models._builtin import portable_name
from ..options import DataOptions, Given, ModelOptions, ShardOptions, model_arguments, option
from ..training._config import TrainConfig
from ._registry import WARNING, Interrupted, check_out_dir, command, ranks_of

if TYPE_CHECKING:
    from ..data import Task

PRESETS = ("paper", "negative", "fast")
# Runs at least this long get a CPU-time estimate from a few measured warm-up steps first.
ESTIMATE_FROM_STEPS = 1000


@dataclass(frozen=True)
class TrainCommand(ShardOptions, DataOptions, ModelOptions):
    """Options of `headsup train`."""

    out: str
    """Output folder: mask.safetensors (masks/ for several tasks), history.csv, checkpoints/, train_config.json."""
    task: list[str]
    """Task name(s), e.g. `organism/reverse` (`headsup tasks` lists them), or your own .json/.jsonl/.csv file of input/output pairs; repeat `--task` or give several: one mask each, trained together."""
    preset: str = "paper"
    """Schedule preset: paper (6 250 steps; 6 190 for XNLI translation), negative (init N(-3, 0.02)) or fast (300 steps, for small models); options given explicitly always win over the preset."""
    estimate: bool = True
    """Before runs of 1 000 steps or more, time a few warm-up steps and print the expected duration."""
    train: TrainConfig = option(default_factory=TrainConfig, group="Training")
    """Training hyper-parameters."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_preset(self.preset)
        if len(set(self.task)) != len(self.task):
            raise ValueError(f"--task names must be distinct, got {self.task}")


def check_preset(preset: str) -> None:
    """A ValueError naming the presets when `preset` is none of them (the closest one first)."""
    if preset not in PRESETS:
        import difflib

        close = difflib.get_close_matches(preset, PRESETS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown preset {preset!r} (--preset); {hint}use one of {', '.join(PRESETS)}")


def resolve_preset(preset: str, config: TrainConfig, given: Collection[str] | None = None) -> TrainConfig:
    """The preset's recipe with the explicitly given options of `config` on top.

    `given` names the `TrainConfig` fields set on the command line (`Given.within("train")`: `lr`,
    `progress`, ...); without it, every field of `config` that differs from the paper's default
    counts as given.
    """
    check_preset(preset)
    presets = {"paper": TrainConfig.paper, "negative": TrainConfig.negative_init, "fast": TrainConfig.fast}
    chosen, paper = presets[preset](), TrainConfig()
    explicit = {
        f.name
        for f in fields(TrainConfig)
        if (f.name in given if given is not None else getattr(config, f.name) != getattr(paper, f.name))
    }
    return chosen.replace(**{name: getattr(config, name) for name in explicit})


def task_steps(preset: str, config: TrainConfig, tasks: list, given: Collection[str] | None = None) -> TrainConfig:
    """Under the paper preset without an explicit `--steps`, the paper's step count of the tasks
    when they carry one (XNLI translation: 6 190 = 10 epochs over 9 900 pairs) instead of 6 250."""
    steps = {task.paper_steps for task in tasks if task.paper_steps is not None}
    explicit = "steps" in given if given is not None else config.steps != TrainConfig().steps
    if preset != "paper" or explicit or not steps:
        return config
    if len(steps) > 1 or (len(steps) == 1 and any(task.paper_steps is None for task in tasks)):
        raise ValueError(
            "the tasks trained together have different paper step counts "
            f"({sorted(steps)} and the default {TrainConfig().steps}); give --steps"
        )
    return config.replace(steps=steps.pop())


def train_plan(args: TrainCommand, given: Given) -> tuple[TrainConfig, list[Task]]:
    """The recipe (the preset with the options given on top, the tasks' paper steps) and the tasks of
    a `headsup train`, refused before any work when a task's training pairs are fewer than a batch."""
    from ..data import load_task  # deferred: the task registry is not needed for --help

    explicit = given.within("train")
    config = resolve_preset(args.preset, args.train, explicit)
    tasks = [load_task(name, args.data_dir) for name in args.task]
    config = task_steps(args.preset, config, tasks, explicit)
    for task in tasks:  # the library checks the same, after the model has loaded
        check_batch_fits(config.batch_size, task.n_train, f"training pairs of {task.name}", "--batch-size")
    return config, tasks


def train_record(args: TrainCommand, config: TrainConfig) -> dict:
    """What a training run's results depend on, as `train_config.json` records it (and the folder's
    run record): the model's portable name, the tasks, the preset and the resolved recipe."""
    return {"model": portable_name(args.model), "tasks": args.task, "preset": args.preset, **config.recipe()}


def check_train(args: TrainCommand, given: Given) -> None:
    train_plan(args, given)


def train_recipe(args: TrainCommand, given: Given) -> dict:
    return train_record(args, train_plan(args, given)[0])


@command("train", TrainCommand, check=check_train, recipe=train_recipe)
def run_train(args: TrainCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    import torch.distributed as dist

    from .._distributed import from_rank0
    from ..models import load_model
    from ..training import TrainingAdvice, resume_step, train_mask, train_masks

    config, tasks = train_plan(args, given)
    out = check_out_dir(args.out)
    rank, device = ranks_of(args)
    if rank is not None:
        dist.barrier()  # no rank starts before rank 0 has claimed --out (an old run moved aside with --fresh)
    model = load_model(args.model, **{**model_arguments(args), "device": device, "shard": args.shard})
    print(
        f"training {'a mask' if len(tasks) == 1 else f'{len(tasks)} masks'} on {model.cfg.n_layers * model.cfg.n_heads} "
        f"heads: preset {args.preset}{preset_note(args.preset, given)}, {config.steps} steps, batch "
        f"{config.batch_size}, lr {config.lr:g}, init N({config.init_mean:g}, {config.init_std:g})"
    )
    # Another run's checkpoint is refused here (--fresh emptied --out). Over several ranks, rank 0's
    # folder decides (ranks on other machines need not see it).
    done = (
        resume_step(out, model, tasks, config)
        if rank is None
        else from_rank0(lambda: resume_step(out, model, tasks, config))
    )
    if done is not None:
        print(f"resuming from the checkpoint of step {done} in {out}")
    if args.estimate and config.steps - (done or 0) >= ESTIMATE_FROM_STEPS:
        _print_estimate(model, tasks, config, done or 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainingAdvice)  # the advice below names the flags instead
            if len(tasks) == 1:
                results = {
                    tasks[0].name: train_mask(model, tasks[0], config, out_dir=out, distributed=rank is not None)
                }
            else:
                results = train_masks(model, tasks, config, out_dir=out, distributed=rank is not None)
    except KeyboardInterrupt:
        raise Interrupted(interrupted_message(out, config.checkpoint_every)) from None
    if rank:  # under torchrun rank 0 alone writes
        return 0
    written = atomic_write_json(out / "train_config.json", train_record(args, config))
    for name, result in results.items():
        print(f"{name}: kept {result.mask.n_kept}/{result.mask.n_total} heads")
    _print_advice(results, args, config)
    masks = [str(out / "mask.safetensors")] if len(tasks) == 1 else [str(out / "masks")]
    print(f"wrote {', '.join(masks)}, {out / 'history.csv'}, {out / 'checkpoints'}, {written}")
    return 0


def preset_note(preset: str, given: Given) -> str:
    """Said of a preset the command line did not choose: that it is the default, and the fast one."""
    if "preset" in given or preset != "paper":
        return ""
    return " (the default: the paper's schedule; --preset fast trains 300 steps, enough for small models)"


def interrupted_message(out: Path, every: int) -> str:
    """What an interrupted training run left in `out`, and how to go on: the step of its saved state,
    or that it had none yet (nothing to resume: a rerun starts over)."""
    from ..training import resume_step  # deferred: keeps --help free of torch

    try:
        step = resume_step(out)
    except ValueError:  # a damaged state: the rerun names it
        step = None
    if step is None:
        return f"interrupted before the first checkpoint: {out} holds no saved state yet, so a rerun starts from step 0"
    return (
        f"interrupted; the state of step {step} is saved in {out / 'checkpoints'}: rerun the same command to "
        f"resume from there (checkpoints every {every} steps and where a run is stopped), or add --fresh to "
        "start over"
    )


def _print_estimate(model, tasks, config: TrainConfig, done: int = 0) -> None:
    # deferred: keeps --help free of torch, pandas and plotly
    from .._progress import activity
    from ..training._estimate import format_duration, seconds_per_step

    # The 7 steps of the measure take minutes on a loaded machine: a line and a bar say what is running.
    print("estimating the training time: timing 7 steps first (--no-estimate skips this) ...", flush=True)
    with activity("estimating the training time", enabled=config.progress):
        per_step = seconds_per_step(model, tasks, config)
    left = config.steps - done
    steps = f"the {left} steps left of {config.steps}" if done else f"{config.steps} steps"
    print(
        f"estimated time: ~{format_duration(per_step * left)} for {steps} "
        f"({per_step * 1e3:.0f} ms/step, the median of 5 timed steps on {model.cfg.device}); "
        f"Ctrl-C or SIGTERM is safe: the run stops after the step under way, with its state saved; rerun to resume"
    )


def _print_advice(results: dict, args: TrainCommand, config: TrainConfig) -> None:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..training._advice import run_problems

    problems = []
    for result in results.values():
        problems += run_problems(result.history, result.mask.n_total)
    if not problems:
        return
    for problem in problems:
        print(f"{WARNING}{problem.task}: {problem.problem}", file=sys.stderr)
    if args.preset != "fast" and config.steps < 1000:
        hint = (
            f"with the {args.preset} schedule (lr {config.lr:g}, init {config.init_mean:g}) heads need ~400 steps "
            f"before any can switch off: use --preset fast, or more --steps (the paper uses 6250)"
        )
    else:
        hint = "train longer (--steps), raise --lr, or start lower (--init-mean, e.g. --preset negative)"
    print(f"advice: {hint}", file=sys.stderr)


# `headsup download-data` lived here; its plan stays importable from this module.
from ._download import download_plan as download_plan  # noqa: E402
