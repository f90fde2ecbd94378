"""What every reproduction script shares: its options, the model, the tasks, cached masks and output files.

A script builds its parser with `parser(...)`, calls `setup(...)` and gets an `Experiment`, which
loads the model, resolves tasks, trains or loads masks (cached under `<out>/<model>/masks/`, so one
script reuses the masks another trained) and writes tables (CSV) and figures (HTML + PNG) to
`<out>/<model>/`: by default `outputs/experiments/` (git-ignored); the committed `figures/` is written
only with `--update-figures` (or an explicit `--out figures`). Defaults are the built-in organism with a short mask schedule
(`TrainConfig.fast`); any other `--model` gets the paper's schedule unless `--schedule fast`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

import headsup_lens as hl
from headsup_lens._io import atomic_write, atomic_write_text
from headsup_lens.data import Task
from headsup_lens.masks import HeadMask
from headsup_lens.models import builtin_model_dir
from headsup_lens.plots import save_figure
from headsup_lens.training import safe_name

ORGANISM = "organism"
# The organism task the single-task figures use: a made-up dictionary, the analogue of the paper's translation.
ORGANISM_TASK = "organism/translate"
# Tasks of the multi-task artifacts (Tables 1/2, 5, 6): four of the eight, to keep `run_all` short on 2 cores.
ORGANISM_TASKS = ("organism/translate", "organism/reverse", "organism/uppercase", "organism/antonym")
FIGURES = Path(__file__).resolve().parents[1] / "figures"
# Default output root: ignored by git, so a run never overwrites the committed figures by accident.
OUTPUTS = Path(__file__).resolve().parents[1] / "outputs" / "experiments"
SCHEDULES = ("auto", "fast", "paper")
CHECKPOINT_EVERY = 31  # the reference's `--save_steps 31`


def parser(description: str, *, multi_task: bool = False) -> argparse.ArgumentParser:
    """The options every script accepts (multi-task scripts take `--tasks` as well as `--task`)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=ORGANISM, help="hub name, local Hugging Face directory, or 'organism' (default)")
    p.add_argument("--task", default=None, help=f"task name (default on the organism: {ORGANISM_TASK})")
    if multi_task:
        p.add_argument(
            "--tasks",
            nargs="+",
            default=None,
            help=f"tasks to compare (default on the organism: {' '.join(ORGANISM_TASKS)})",
        )
    p.add_argument("--data-dir", default=None, help="data directory (default: $HEADSUP_DATA_DIR, then the user cache)")
    p.add_argument("--device", default=None, help="device (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="model dtype (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument(
        "--prompt-format",
        default="paper",
        choices=["paper", "chat-template"],
        help="paper: the reference code's turn for the model's family (no system block); "
        "chat-template: the tokenizer's own template",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output root; files go to <out>/<model>/ (default: outputs/experiments/, git-ignored)",
    )
    p.add_argument(
        "--update-figures",
        action="store_true",
        help="write to the committed figures/ folder (the same as --out figures)",
    )
    p.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="auto",
        help="mask schedule: auto = fast on the organism, the paper's otherwise",
    )
    p.add_argument("--steps", type=int, default=None, help="override the schedule's training steps")
    p.add_argument("--batch-size", type=int, default=None, help="override the schedule's batch size per task")
    p.add_argument(
        "--eval-batch-size",
        type=int,
        default=64,
        help="examples per evaluation forward pass / generation (default: 64)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of mask training and random baselines (default: 0)")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=CHECKPOINT_EVERY,
        help=f"save the mask logits every this many training steps (default: {CHECKPOINT_EVERY}, the "
        "reference's save_steps; the Fig. 3 trajectories)",
    )
    p.add_argument(
        "--masks",
        default=None,
        help="folder of stored masks to use instead of training: <task>.safetensors (default init), "
        "<task>_negative.safetensors (negative init), <task>_query.safetensors (query gate), "
        "<task>_mlp.safetensors (heads + FFN slots); "
        "e.g. figures/smollm2/masks",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: 1 on the organism, whose ops are too small to share; torch's setting otherwise)",
    )
    p.add_argument("--no-png", action="store_true", help="write HTML figures only")
    return p


@dataclass
class TrainedMask:
    """A learned mask and the training run folder it came from (checkpoints for Fig. 3)."""

    mask: HeadMask
    run_dir: Path | None


@dataclass
class Experiment:
    """One script's run: options, loaded model and output folder."""

    name: str
    args: argparse.Namespace
    model: object
    out: Path
    started: float = field(default_factory=time.perf_counter)

    # ------------------------------------------------------------------ model and tasks
    @property
    def is_organism(self) -> bool:
        return self.args.model == ORGANISM

    @property
    def model_dir(self) -> Path | None:
        """The local directory of the model (the organism's weights folder), if any."""
        builtin = builtin_model_dir(self.args.model)
        path = builtin if builtin is not None else Path(self.args.model).expanduser()
        return path if path.is_dir() else None

    def planted(self) -> dict[str, list[tuple[int, int]]] | None:
        """The planted pathways S_t (`organism/<task>` -> heads) when the model carries them, else None."""
        directory = self.model_dir
        if directory is None or not (directory / "planted.json").is_file():
            return None
        from headsup_lens.organism import load_planted

        return {f"organism/{name}": heads for name, heads in load_planted(directory).items()}

    def _default_tasks(self) -> tuple[str, ...] | None:
        return ORGANISM_TASKS if self.is_organism or self.planted() is not None else None

    def task(self) -> Task:
        """`--task`, defaulting to `ORGANISM_TASK` on the organism."""
        name = self.args.task or (ORGANISM_TASK if self._default_tasks() else None)
        if name is None:
            raise SystemExit(f"{self.name}: --task is required for --model {self.args.model}")
        return hl.load_task(name, self.args.data_dir)

    def tasks(self) -> list[Task]:
        """`--tasks` (multi-task scripts), else the organism's default set, else just `--task`."""
        names = getattr(self.args, "tasks", None) or self._default_tasks()
        if not names:
            return [self.task()]
        return [hl.load_task(name, self.args.data_dir) for name in names]

    # ------------------------------------------------------------------ masks
    def train_config(self, *, negative: bool = False, gate: str = "value", mlp: bool = False) -> hl.TrainConfig:
        """The schedule of this run: `TrainConfig.fast` on the organism, the paper's elsewhere;
        `mlp` also learns one slot per layer for the FFN output (App. C.3.3, Table 40)."""
        schedule = self.args.schedule
        if schedule == "auto":
            schedule = "fast" if self.is_organism or self.planted() is not None else "paper"
        config = hl.TrainConfig.fast() if schedule == "fast" else hl.TrainConfig.paper()
        changes: dict = {
            "seed": self.args.seed,
            "gate": gate,
            "progress": sys.stderr.isatty(),
            "checkpoint_every": self.args.checkpoint_every,
        }
        if negative:
            changes["init_mean"] = hl.TrainConfig.negative_init().init_mean
        if mlp:
            changes["mlp"] = True
        if self.args.steps is not None:
            changes["steps"] = self.args.steps
        if self.args.batch_size is not None:
            changes["batch_size"] = self.args.batch_size
        return config.replace(**changes)

    def mask_cache(self, config: hl.TrainConfig) -> Path:
        """`<out>/<model>/masks/<recipe>-<weights digest>/`: one folder per recipe and model weights."""
        # The prompt format and the library version change what a recipe learns, so they key the cache too.
        key = {**config.recipe(), "prompt_format": hl.prompt_format(self.model).name, "version": hl.__version__}
        recipe = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        return self.out / "masks" / f"{recipe}-{weights_digest(self.model)}"

    def masks(
        self, tasks: list[Task], *, negative: bool = False, gate: str = "value", mlp: bool = False
    ) -> dict[str, TrainedMask]:
        """A learned mask per task: from the cache when some earlier run trained it with the same
        recipe on the same weights, else trained now (the missing tasks together, one forward pass
        per step) and cached. Cached files are written atomically by the training code. With
        `--masks DIR` the stored masks are used and nothing is trained (`run_dir` is then None)."""
        if self.args.masks is not None:
            return {
                t.name: TrainedMask(self.stored_mask(t, negative=negative, gate=gate, mlp=mlp), None) for t in tasks
            }
        config = self.train_config(negative=negative, gate=gate, mlp=mlp)
        cache = self.mask_cache(config)
        found: dict[str, TrainedMask] = {}
        for task in tasks:
            for path in sorted(cache.glob(f"*/masks/{safe_name(task.name)}.safetensors")):
                found[task.name] = TrainedMask(HeadMask.load(path, self.model), path.parents[1])
                break
        missing = [t for t in tasks if t.name not in found]
        if missing:
            names = [t.name for t in missing]
            run_dir = cache / hashlib.sha256("\n".join(names).encode()).hexdigest()[:10]
            kind = f"{'negative-init ' if negative else ''}{gate}-gate{' + FFN' if mlp else ''}"
            print(f"[{self.name}] training {kind} masks for {', '.join(names)} ({config.steps} steps) -> {run_dir}")
            results = hl.train_masks(self.model, missing, config, out_dir=run_dir)
            atomic_write_text(
                run_dir / "recipe.json",
                json.dumps({"model": self.args.model, "tasks": names, **config.recipe()}, indent=2),
            )
            for name, result in results.items():
                found[name] = TrainedMask(result.mask, run_dir)
        return {t.name: found[t.name] for t in tasks}

    def stored_mask(self, task: Task, *, negative: bool = False, gate: str = "value", mlp: bool = False) -> HeadMask:
        """`<--masks>/<task>[_negative][_query][_mlp].safetensors`, checked against the loaded model."""
        suffix = ("_negative" if negative else "") + ("_query" if gate == "query" else "") + ("_mlp" if mlp else "")
        path = Path(self.args.masks) / f"{safe_name(task.name)}{suffix}.safetensors"
        if not path.is_file():
            raise SystemExit(f"{self.name}: no stored mask {path} (--masks); train it first or leave out --masks")
        return HeadMask.load(path, self.model)

    def mask(self, task: Task, *, negative: bool = False, gate: str = "value") -> TrainedMask:
        """The learned mask of one task; on the organism the default task set is trained together
        (every mask gets exactly the gradient it would get alone), so other scripts find theirs cached."""
        tasks = self.tasks() if not getattr(self.args, "tasks", None) else []
        if task.name not in [t.name for t in tasks]:
            tasks = [task]
        return self.masks(tasks, negative=negative, gate=gate)[task.name]

    # ------------------------------------------------------------------ outputs
    def path(self, stem: str, task: Task | None = None) -> Path:
        """`<out>/<model>/<stem>[_<task>]` (organism tasks lose their `organism/` prefix)."""
        suffix = f"_{safe_name(task.name.removeprefix('organism/'))}" if task is not None else ""
        return self.out / f"{stem}{suffix}"

    def table(self, frame: pd.DataFrame, stem: str, task: Task | None = None) -> Path:
        path = self.path(stem, task).with_suffix(".csv")
        atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"))
        return path

    def figure(self, fig, stem: str, task: Task | None = None) -> Path:
        """HTML beside one shared plotly.min.js (no external URL, small files) and a PNG."""
        saved = save_figure(fig, self.path(stem, task), png=not self.args.no_png, root=figure_root(self.out))
        if saved.png is None and not self.args.no_png and saved.png_error not in _PNG_ERRORS_SHOWN:
            _PNG_ERRORS_SHOWN.add(saved.png_error)
            print(f"[{self.name}] PNG figures not written (HTML written): {saved.png_error}")
        return saved.html

    def done(self, summary: pd.DataFrame | str | None = None) -> None:
        """Print the summary table and where the outputs went."""
        if summary is not None:
            text = (
                summary
                if isinstance(summary, str)
                else summary.to_string(index=False, float_format=lambda v: f"{v:.3f}")
            )
            print(text)
        print(f"[{self.name}] done in {time.perf_counter() - self.started:.0f} s -> {self.out}")


_PNG_ERRORS_SHOWN: set[str | None] = set()


def output_root(args: argparse.Namespace) -> Path:
    """`--out`, else figures/ with `--update-figures`, else the git-ignored outputs/experiments/."""
    if args.out is not None and args.update_figures and Path(args.out).resolve() != FIGURES:
        raise SystemExit("give either --out or --update-figures, not both")
    if args.out is not None:
        return Path(args.out)
    return FIGURES if args.update_figures else OUTPUTS


def figure_root(out: str | os.PathLike) -> Path:
    """The folder whose one `plotly.min.js` every HTML figure under `out` loads: `figures/` (or the
    git-ignored `outputs/experiments/`) when `out` lies inside it, else `out` itself."""
    resolved = Path(out).resolve()
    for root in (FIGURES, OUTPUTS):
        if resolved.is_relative_to(root):
            return root
    return Path(out)


def model_slug(name: str) -> str:
    """The output folder of a model: `organism`, or the last part of a hub name / directory."""
    return safe_name(Path(str(name).rstrip("/")).name or str(name))


def weights_digest(model) -> str:
    """A short digest of the model's weights (sums per tensor), so a retrained model never reuses
    masks cached for its predecessor. One reduction per tensor, no copies: cheap on an 8B GPU model."""
    with torch.no_grad():
        sums = [(name, float(p.sum(dtype=torch.float64))) for name, p in model.original_model.named_parameters()]
    return hashlib.sha256(json.dumps(sums).encode()).hexdigest()[:10]


def setup(name: str, args: argparse.Namespace) -> Experiment:
    """Load the model named by the options and prepare `<out>/<model>/`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    threads = args.threads if args.threads is not None else (1 if args.model == ORGANISM else None)
    if threads is not None:
        torch.set_num_threads(threads)
    model = hl.load_model(args.model, device=args.device, dtype=args.dtype, prompt_format=args.prompt_format)
    out = output_root(args) / model_slug(args.model)
    out.mkdir(parents=True, exist_ok=True)
    return Experiment(name=name, args=args, model=model, out=out)


def record_time(out: Path, stage: str, what: str, seconds: float) -> None:
    """Append one stage's wall time (and the torch threads it ran on) to `out/times.csv`, and print it."""
    path = out / "times.csv"
    row = pd.DataFrame(
        [{"stage": stage, "what": what, "seconds": round(seconds, 1), "threads": torch.get_num_threads()}]
    )
    row.to_csv(path, mode="a", header=not path.exists(), index=False)
    print(f"[{stage}] {what}: {seconds:.1f} s", flush=True)


def fast_config(args: argparse.Namespace, **changes) -> hl.TrainConfig:
    """`TrainConfig.fast` with the script's `--seed` and, where given, `--steps` / `--batch-size`."""
    changes["seed"] = args.seed
    for name in ("steps", "batch_size"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    return hl.TrainConfig.fast(**changes)
