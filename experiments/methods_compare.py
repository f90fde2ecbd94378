"""Head-finding methods side by side: per task, every method's ranking, its cost, its elicitation curve
(accuracy and answer loss without instruction as its heads are removed) and, on the organism, its
ROC/AUROC against the planted heads. Resumable: each ranking is saved as it finishes
(`methods/<task>/<method>.json`) and each task's curves once done; a rerun skips what exists.

Learned masks: trained here for all tasks at once (`--schedule`, the organism's fast one by default;
cost = training time / number of tasks), or read from `--masks-dir/<task>.safetensors` (cost =
the time of `--cost-steps` training steps of the mask's recipe, scaled to its step count).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from headsup_lens.analysis import DEFAULT_METHODS
from headsup_lens.plots import auroc_table_figure, elicitation_figure, roc_figure
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script
from headsup_lens.reproduce._methods import auroc_table, compare_methods_on_tasks, ranking_table
from headsup_lens.training import safe_name


@dataclass(frozen=True)
class Options(MultiTaskOptions):
    """Options of the method comparison."""

    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    """Methods to compare (default: all)."""
    k_max: int = 24
    """Largest number of heads removed on the curves."""
    k_step: int = 2
    """k step of the curves."""
    n_eval: int = 24
    """Evaluation examples per curve point."""
    n_examples: int = 16
    """Training examples the methods score on."""
    soft_steps: int = 60
    """Optimisation steps of the soft gates."""
    soft_lr: float = 0.1
    """Learning rate of the soft gates."""
    masks_dir: str | None = None
    """Folder of stored learned masks <task>.safetensors (default: train)."""
    cost_steps: int = 10
    """Training steps timed to estimate a stored mask's cost."""
    max_rows: int = 256
    """Rows per batched pass."""
    rankings_only: bool = False
    """Only rank heads (saved per method) and write the AUROC table from the rankings found; no curves."""


def run(xp: Experiment, options: Options) -> str:
    tasks, folder = xp.tasks(), xp.out / "methods"
    soft = {"steps": options.soft_steps, "lr": options.soft_lr}
    settings = dict(n_examples=options.n_examples, seed=options.seed, max_rows=options.max_rows)
    settings["options"] = dict.fromkeys(("soft_gate_necessary", "soft_gate_sufficient"), soft)
    if options.rankings_only:
        xp.table(table := ranking_table(xp.model, tasks, options.methods, folder, **settings), "methods_rankings")
    else:
        learned = dict(config=xp.train_config(), masks_dir=options.masks_dir, cost_steps=options.cost_steps)
        limits = dict(k_max=options.k_max, k_step=options.k_step, n_eval=options.n_eval)
        done = compare_methods_on_tasks(xp.model, tasks, options.methods, folder, learned=learned, **limits, **settings)
        for name, comparison in done.comparisons.items():
            stem = f"methods_{safe_name(name.removeprefix('organism/'))}"
            xp.figure(elicitation_figure(comparison), stem + "_curves")
            if comparison.planted:
                xp.figure(roc_figure(comparison), stem + "_roc")
        xp.table(table := done.summary, "methods_summary")
    text = ""
    if "auroc" in table:
        aurocs = auroc_table(table)
        xp.table(aurocs.reset_index(), "methods_auroc")
        xp.figure(auroc_table_figure(aurocs), "methods_auroc")
        text = aurocs.to_string(float_format="{:.2f}".format) + "\n"
    names = ("k_max", "k_step", "n_eval", "n_examples", "soft_steps", "soft_lr")
    return text + f"settings: { {k: getattr(options, k) for k in names} }, threads: {torch.get_num_threads()}"


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
