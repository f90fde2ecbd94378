"""`headsup compare-methods`: head-finding methods side by side on one task.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .._io import OutputSet, atomic_write
from .._validate import check_float
from ..options import (
    DataOptions,
    FigureOptions,
    Given,
    ModelOptions,
    ThreadOptions,
    check_counts,
    model_arguments,
)
from ..training import TrainConfig
from ._outputs import compact_table
from ._registry import check_out_dir, command, mask_file


@dataclass(frozen=True)
class CompareMethodsCommand(ThreadOptions, FigureOptions, DataOptions, ModelOptions):
    """Options of `headsup compare-methods`."""

    task: str
    """Task name, e.g. `organism/reverse` or `antonym` (`headsup tasks` lists them)."""
    out: str
    """Output folder: summary.csv, curves.csv, one <method>.json ranking each, figures (and roc.csv on the organism)."""
    method: list[str] = field(default_factory=list)
    """Methods to compare (default: all): learned_mask single_ablation gate_gradient attribution_patching activation_pattern soft_gate_necessary soft_gate_sufficient random."""
    mask: str | None = None
    """Learned mask (file, or a `headsup train` output folder) for learned_mask; without it a mask is trained (--schedule)."""
    schedule: Literal["fast", "paper"] = "fast"
    """Schedule of a mask trained here for learned_mask: fast (300 steps) or paper."""
    k_max: int = 24
    """Largest number of heads removed on the elicitation curves."""
    k_step: int = 2
    """Step in k of the elicitation curves."""
    n_eval: int = 24
    """Evaluation examples (without instruction) per curve point."""
    n_examples: int = 16
    """Training examples (without instruction) the methods score heads on."""
    ablation: str = "zero"
    """What removing a head means for the ablating methods: zero, scaled (keeps --alpha) or mean (its mean hook_z)."""
    alpha: float = 0.25
    """Share of a head's output kept by scaled ablation."""
    soft_steps: int = 60
    """Optimisation steps of the soft gates."""
    planted: bool = True
    """On organism tasks, score the rankings against the planted heads (ROC, AUROC, precision); --no-planted skips it."""
    seed: int = 0
    """Seed of the random ranking, the soft gates and a mask trained here."""
    max_rows: int = 256
    """Rows per batched forward pass."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, k_max=1, k_step=1, n_eval=1, n_examples=1, soft_steps=1, seed=0, max_rows=1)
        check_float("alpha", self.alpha, 0.0, 1.0)


def check_compare_methods(args: CompareMethodsCommand, given: Given) -> None:
    if args.mask:
        mask_file(args.mask)


@command("compare-methods", CompareMethodsCommand, check=check_compare_methods)
def run_compare_methods(args: CompareMethodsCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    import torch

    from ..analysis import DEFAULT_METHODS, METHODS, compare_methods
    from ..masks import HeadMask
    from ..models import load_model
    from ..plots import elicitation_figure, roc_figure, save_figure

    methods = list(args.method) or list(DEFAULT_METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"--method {unknown[0]!r} is not a method; choose from {', '.join(sorted(METHODS))}")
    from ..data import load_task  # deferred: the task registry is not needed for --help

    task = load_task(args.task, args.data_dir)
    # One thread on the organism, as `headsup demo`: its operations are too small to share, and on a
    # busy machine torch's default (every core) made the learned mask's 300 steps several times slower.
    threads = args.threads if args.threads is not None else (1 if args.model == "organism" else None)
    if threads is not None:
        torch.set_num_threads(threads)
    mask_path = mask_file(args.mask) if args.mask else None
    out = check_out_dir(args.out)
    model = load_model(args.model, **model_arguments(args))
    learned: dict[str, object] = (
        {"mask": HeadMask.load(mask_path, model)}
        if mask_path
        else {
            "config": (TrainConfig.fast() if args.schedule == "fast" else TrainConfig.paper()).replace(seed=args.seed)
        }
    )
    options: dict[str, dict[str, object]] = {"learned_mask": learned}
    for name in ("soft_gate_necessary", "soft_gate_sufficient"):
        options[name] = {"steps": args.soft_steps}
    stage = OutputSet(out, "compare-methods")  # one set: a run killed midway leaves the earlier one whole
    comparison = compare_methods(
        model,
        task,
        methods,
        k_max=args.k_max,
        k_step=args.k_step,
        n_eval=args.n_eval,
        planted="auto" if args.planted else None,
        options=options,
        n_examples=args.n_examples,
        ablation=args.ablation,
        alpha=args.alpha,
        seed=args.seed,
        max_rows=args.max_rows,
        on_method=lambda ranking: ranking.save(stage.path / f"{ranking.method}.json"),
    )
    for name, frame in (("summary", comparison.summary), ("curves", comparison.curves)):
        atomic_write(stage.path / f"{name}.csv", lambda tmp, frame=frame: frame.to_csv(tmp, index=False))
    save_figure(elicitation_figure(comparison), stage.path / "curves", png=args.png, served_from=out)
    if comparison.planted:
        atomic_write(stage.path / "roc.csv", lambda tmp: comparison.roc().to_csv(tmp, index=False))
        save_figure(roc_figure(comparison), stage.path / "roc", png=args.png, served_from=out)
    written = [Path(p).name for p in stage.commit()]
    print(compact_table(comparison.summary, full="summary.csv"))
    print(f"wrote to {out}: {', '.join(written)}")
    return 0
