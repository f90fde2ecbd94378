"""`Experiment`: one reproduction script's run, and `run_script`, the `main` of every script.

A script declares its options (a dataclass extending `ExperimentOptions`) and a function
`run(xp, options)` that computes its artifact through `xp` and returns a summary. `run_script`
parses the options in the CLI's style, opens the output folder `<root>/<model>/` (one writer at a
time: the folder lock), loads the model, runs the script and moves its tables and figures in as one
set (`OutputSet`): a failed or interrupted run leaves the previous outputs as they were. The folder
records the model it belongs to (`model.json`, the model fingerprint) and refuses another model's
outputs. Learned masks come from the cache (`cached_masks`), shared by every script.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import torch
from transformer_lens.model_bridge import TransformerBridge

from .._io import REPRODUCE, OutputSet, atomic_write, atomic_write_json, locked_folder, read_table, stored_table
from .._progress import progress_off
from ..data import Task, load_task
from ..masks import HeadMask
from ..models import ModelFingerprint, builtin_model_dir, fingerprint, identity_differences, load_model
from ..models._fingerprint import portable_name
from ..options import model_arguments, parse
from ..organism import load_planted
from ..plots import save_figure
from ..plots._save import PLOTLY_JS
from ..training import TrainConfig, safe_name
from ._masks import TrainedMask, cached_masks, stored_mask_path
from ._options import DEFAULT_ORGANISM_TASKS, ORGANISM_TASK, ExperimentOptions
from ._script import script_errors

ORGANISM = "organism"
MODEL_RECORD = "model.json"
TIMES = "times.csv"
Options = TypeVar("Options", bound=ExperimentOptions)
Summary = pd.DataFrame | str | None


def model_slug(name: str) -> str:
    """The output folder of a model: `organism`, or the last part of a hub name / directory."""
    return safe_name(Path(str(name).rstrip("/")).name or str(name))


def output_root(options: ExperimentOptions, root: str | os.PathLike) -> Path:
    """`--out`, else `<root>/figures` with `--update-figures`, else the git-ignored `<root>/outputs/experiments`."""
    figures = Path(root) / "figures"
    if options.out is not None and options.update_figures and Path(options.out).resolve() != figures.resolve():
        raise ValueError("give either --out or --update-figures, not both")
    if options.out is not None:
        return Path(options.out).expanduser()
    return figures if options.update_figures else Path(root) / "outputs" / "experiments"


def check_options(options: ExperimentOptions) -> None:
    """The script options that read the disk, checked before any work (their values are checked when
    the options are built: `ExperimentOptions.__post_init__`)."""
    if options.masks is not None and not Path(options.masks).expanduser().is_dir():
        raise ValueError(f"the masks argument {options.masks} is not a folder")


def check_model_record(folder: str | os.PathLike, model: TransformerBridge, name: str) -> None:
    """Refuse `folder` when it holds another model's outputs (`model.json`); record this model there
    when it records none. The model fingerprint decides (its content hash), not the name."""
    path = Path(folder) / MODEL_RECORD
    mine = fingerprint(model)
    if path.is_file():
        try:
            theirs = ModelFingerprint.from_dict(json.loads(path.read_text(encoding="utf-8"))["fingerprint"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} is not a model record ({error}); remove it or choose another out_dir") from None
        if identity_differences({"model": theirs.to_dict()}, {"model": mine.to_dict()}):
            raise ValueError(
                f"out_dir {folder} holds the outputs of model {theirs.describe()}, not of {mine.describe()}: "
                "choose another out_dir"
            )
        return
    atomic_write_json(path, {"model": portable_name(name), "fingerprint": mine.to_dict()})


class Experiment:
    """One script's run: its options, the loaded model, the output folder (locked while the run
    lasts) and the tables and figures it writes (staged, moved in together when the run ends)."""

    def __init__(self, name: str, options: ExperimentOptions, model: TransformerBridge, out: Path, stage: OutputSet):
        self.name = name
        self.options = options
        self.model = model
        self.out = out
        self._stage = stage
        self._stems: set[str] = set()
        self._png_errors: set[str | None] = set()
        self.started = time.perf_counter()

    # ------------------------------------------------------------------ model and tasks
    @property
    def is_organism(self) -> bool:
        """Whether the experiment runs on the built-in organism (`--model organism`)."""
        return self.options.model == ORGANISM

    @property
    def model_dir(self) -> Path | None:
        """The local directory of the model (the organism's weights folder), if any."""
        builtin = builtin_model_dir(self.options.model)
        path = builtin if builtin is not None else Path(self.options.model).expanduser()
        return path if path.is_dir() else None

    def planted(self) -> dict[str, list[tuple[int, int]]] | None:
        """The planted pathways S_t (`organism/<task>` -> heads) when the model carries them, else None."""
        directory = self.model_dir
        if directory is None or not (directory / "planted.json").is_file():
            return None
        return {f"organism/{name}": heads for name, heads in load_planted(directory).items()}

    @property
    def organism_like(self) -> bool:
        """The organism, or a model with planted pathways: organism defaults and the fast schedule apply."""
        return self.is_organism or self.planted() is not None

    def task(self) -> Task:
        """`--task`, defaulting to `ORGANISM_TASK` on the organism."""
        name = self.options.task or (ORGANISM_TASK if self.organism_like else None)
        if name is None:
            raise ValueError(f"--task is required for --model {self.options.model}")
        return load_task(name, self.options.data_dir)

    def tasks(self) -> list[Task]:
        """`--tasks` (multi-task scripts), else the organism's default set, else just `--task`."""
        names = getattr(self.options, "tasks", None) or (DEFAULT_ORGANISM_TASKS if self.organism_like else None)
        if not names:
            return [self.task()]
        return [load_task(name, self.options.data_dir) for name in names]

    # ------------------------------------------------------------------ masks
    def train_config(self, *, negative: bool = False, gate: str = "value", mlp: bool = False) -> TrainConfig:
        """This run's schedule: `TrainConfig.fast` on the organism, the paper's elsewhere (`--schedule`),
        with `--seed`, `--checkpoint-every` and, where given, `--steps` / `--batch-size`; `mlp` also
        learns one slot per layer for the FFN output (App. C.3.3, Table 40)."""
        schedule = self.options.schedule
        if schedule == "auto":
            schedule = "fast" if self.organism_like else "paper"
        config = TrainConfig.fast() if schedule == "fast" else TrainConfig.paper()
        changes: dict[str, Any] = {
            "seed": self.options.seed,
            "gate": gate,
            "progress": True,  # shown unless --no-progress switched every bar off (open_experiment)
            "checkpoint_every": self.options.checkpoint_every,
        }
        if negative:
            changes["init_mean"] = TrainConfig.negative_init().init_mean
        if mlp:
            changes["mlp"] = True
        for name in ("steps", "batch_size"):
            if getattr(self.options, name) is not None:
                changes[name] = getattr(self.options, name)
        return config.replace(**changes)

    def masks(
        self, tasks: Sequence[Task], *, negative: bool = False, gate: str = "value", mlp: bool = False
    ) -> dict[str, TrainedMask]:
        """A learned mask per task, from the cache or trained now (`cached_masks`); with `--masks DIR`
        the stored masks are used and nothing is trained (`run_dir` is then None)."""
        if self.options.masks is not None:
            return {
                t.name: TrainedMask(self.stored_mask(t, negative=negative, gate=gate, mlp=mlp), None) for t in tasks
            }
        config = self.train_config(negative=negative, gate=gate, mlp=mlp)
        return cached_masks(self.model, tasks, config, self.out, model_name=self.options.model)

    def stored_mask(self, task: Task, *, negative: bool = False, gate: str = "value", mlp: bool = False) -> HeadMask:
        """`<--masks>/<task>[_negative][_query][_mlp].safetensors`, checked against the loaded model."""
        if self.options.masks is None:
            raise ValueError("stored masks need --masks (a folder of masks)")
        path = stored_mask_path(self.options.masks, task, negative=negative, gate=gate, mlp=mlp)
        if not path.is_file():
            raise ValueError(f"--masks: no stored mask {path}; train it first or leave out --masks")
        return HeadMask.load(path, self.model)

    def mask(self, task: Task, *, negative: bool = False, gate: str = "value") -> TrainedMask:
        """The learned mask of one task; on the organism the default task set is trained together
        (every mask gets exactly the gradient it would get alone), so other scripts find theirs cached."""
        together = self.tasks() if not getattr(self.options, "tasks", None) else []
        if task.name not in [t.name for t in together]:
            together = [task]
        return self.masks(together, negative=negative, gate=gate)[task.name]

    # ------------------------------------------------------------------ outputs
    def stem(self, stem: str, task: Task | None = None) -> str:
        """`<stem>[_<task>]` (organism tasks lose their `organism/` prefix)."""
        return stem + (f"_{safe_name(task.name.removeprefix('organism/'))}" if task is not None else "")

    def table(
        self,
        frame: pd.DataFrame,
        stem: str,
        task: Task | None = None,
        *,
        float_format: str | None = "%.6g",
        compress: bool = False,
    ) -> Path:
        """Write `frame` as `<out>/<stem>[_<task>].csv` when the run ends (`float_format` None: every
        digit, so a reader gets the same floats back; `compress`: `.csv.gz`, for the long tables of
        every output, which pandas and the results pages read as they are); the final path."""
        name = self.stem(stem, task) + ".csv"
        compress = compress or (self.out / f"{name}.gz").is_file()  # a table stored compressed stays so
        name += ".gz" if compress else ""
        # mtime 0: the same table gives the same bytes (a rerun that changes nothing changes no file)
        how = {"method": "gzip", "mtime": 0} if compress else None
        atomic_write(
            self.staged(name),
            lambda tmp: frame.to_csv(tmp, index=False, float_format=float_format, compression=how),
        )
        return self.out / name

    def staged(self, name: str) -> Path:
        """Where to write `<out>/<name>` (`name` relative to `out`, e.g. `masks/x.safetensors`): a path
        in the staging folder, its folder made; the file is moved in with the others when the run ends."""
        self._stems.add(name)
        path = self._stage.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def current(self, name: str) -> Path:
        """`<out>/<name>` as this run sees it: the file this run wrote (staged), else the one in `out`;
        a `.csv` stored gzipped is found by its plain name (`stored_table`)."""
        staged = stored_table(self._stage.path / name)
        return staged if staged.is_file() else stored_table(self.out / name)

    def files(self, pattern: str) -> list[Path]:
        """The files matching `pattern` (relative to `out`) as this run sees them (`current`), by name."""
        names: set[str] = set()
        for folder in (self.out, self._stage.path):
            for found in (*folder.glob(pattern), *(folder.glob(pattern + ".gz") if pattern.endswith(".csv") else ())):
                if found.is_file():
                    names.add(found.relative_to(folder).as_posix().removesuffix(".gz"))
        return [self.current(name) for name in sorted(names)]

    def text(self, text: str, name: str) -> Path:
        """Write `text` as `<out>/<name>` when the run ends; the final path."""
        atomic_write(self.staged(name), lambda tmp: tmp.write_text(text, encoding="utf-8"))
        return self.out / name

    def figure(self, fig, stem: str, task: Task | None = None) -> Path:
        """An HTML figure beside one shared plotly.min.js (no external URL) and a PNG (unless
        `--no-png`), written when the run ends; the final HTML path."""
        name = self.stem(stem, task)
        staged = self.staged(name)
        # Staged first, read from `out`: one plotly.min.js in the output root, or the nearest one above it
        # (figures/plotly.min.js for a committed run's folder, `--out figures/.../step6250`).
        root = next((a for a in self.out.parents if (a / PLOTLY_JS).is_file()), self.out.parent)
        saved = save_figure(fig, staged, png=self.options.png, root=root, served_from=(self.out / name).parent)
        if saved.png is None and self.options.png and saved.png_error not in self._png_errors:
            self._png_errors.add(saved.png_error)
            print(f"[{self.name}] PNG figures not written (HTML written): {saved.png_error}")
        return (self.out / name).parent / saved.html.name

    def record_time(self, what: str, seconds: float) -> None:
        """Append one stage's wall time to `<out>/times.csv` (at once: a log, not a result)."""
        record_time(self.out, self.name, what, seconds)

    def timed(self, what: str, stage: str | None = None) -> contextlib.AbstractContextManager[None]:
        """Record the block's wall time under `stage` (default: the script's name); see `timed`."""
        return timed(self.out, stage or self.name, what)

    def commit(self) -> list[Path]:
        """Move the staged tables and figures in as one set; called by `open_experiment` at the end.
        The set is named by the script and its files' stems: a rerun of the same outputs replaces
        them (and drops what it no longer writes, e.g. PNGs after `--no-png`), other runs stay."""
        digest = hashlib.sha256("\n".join(sorted(self._stems)).encode()).hexdigest()[:10]
        self._stage.name = f"{self.name}-{digest}"
        return self._stage.commit()


def record_time(folder: str | os.PathLike, stage: str, what: str, seconds: float) -> Path:
    """Append one stage's wall time (and the torch threads it ran on) to `folder/times.csv`, and print it."""
    path = Path(folder) / TIMES
    row = {"stage": stage, "what": what, "seconds": round(seconds, 1), "threads": torch.get_num_threads()}
    table = pd.concat([read_table(path), pd.DataFrame([row])]) if path.is_file() else pd.DataFrame([row])
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))
    print(f"[{stage}] {what}: {seconds:.1f} s", flush=True)
    return path


@contextmanager
def timed(folder: str | os.PathLike, stage: str, what: str) -> Iterator[None]:
    """Record the block's wall time in `folder/times.csv` (`record_time`) when it ends without error."""
    started = time.perf_counter()
    yield
    record_time(folder, stage, what, time.perf_counter() - started)


@contextmanager
def open_experiment(name: str, options: ExperimentOptions, root: str | os.PathLike) -> Iterator[Experiment]:
    """Check the options, load the model and hold `<out>/<model>/` for the block; the outputs are
    moved in when the block ends without error (a failure leaves the previous ones)."""
    check_options(options)
    out = output_root(options, root) / model_slug(options.model)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    threads = options.threads if options.threads is not None else (1 if options.model == ORGANISM else None)
    if threads is not None:
        torch.set_num_threads(threads)
    with (
        contextlib.nullcontext() if options.progress else progress_off(),
        locked_folder(out, "--out"),
    ):
        if (out / TIMES).is_file():  # a damaged log is named now, not after the work, when it is appended to
            read_table(out / TIMES)
        model = load_model(options.model, **model_arguments(options))
        check_model_record(out, model, options.model)
        xp = Experiment(name, options, model, out, OutputSet(out, name, owner=REPRODUCE, option="--out", adopt=True))
        yield xp
        xp.commit()


def run_script(
    script: str | os.PathLike,
    options: type[Options],
    run: Callable[[Experiment, Options], Summary],
    argv: Sequence[str] | None = None,
    *,
    description: str | None = None,
) -> Summary:
    """The `main` of a reproduction script at path `script` (its `__file__`; outputs go under the
    folder above it): parse `options`, run `run(xp, options)` in `open_experiment`, print its
    summary. A bad option or input, or an interruption, ends the process with one line naming the
    option as typed (`script_errors`; `--debug` for the traceback)."""
    path = Path(script).resolve()
    name = path.stem
    config, given = parse(options, argv, prog=name, description=description)
    with script_errors(name, config, given), open_experiment(name, config, path.parents[1]) as xp:
        summary = run(xp, config)
    if summary is not None:
        print(
            summary if isinstance(summary, str) else summary.to_string(index=False, float_format=lambda v: f"{v:.3f}")
        )
    print(f"[{name}] done in {time.perf_counter() - xp.started:.0f} s -> {xp.out}")
    return summary
