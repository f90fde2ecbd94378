"""The SFT activation-pattern paper's experiments (Zhao, Du et al.) on the organism and on SmolLM2.

    python experiments/sft_patterns.py organism --update-figures   # base organism -> instruction SFT on every task + composites
    python experiments/sft_patterns.py smollm2 --update-figures    # LoRA SFT of SmolLM2-135M-Instruct on function-vector tasks
    python experiments/sft_patterns.py lora --model gemma3-270m --update-figures   # the same LoRA SFT of another model
    python experiments/sft_patterns.py select --update-figures     # pattern-guided data selection (Tables 2/3), --model organism|smollm2
    python experiments/sft_patterns.py grouping --update-figures   # Fig. 2's grouping test again, from a stored correlation matrix

The stages are `headsup_lens.reproduce`'s (`sft_organism`, `sft_smollm2`, `sft_selection`,
`sft_grouping`) over `headsup_lens.sft`'s measurements; experiments/README.md lists the files written to
`<out>/<model>/`. Run folders go to `--runs` (git-ignored): a rerun resumes. Wall times are appended to
`sft_times.csv`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from headsup_lens.options import option
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script
from headsup_lens.reproduce._sft import (
    organism_selection,
    sft_grouping,
    sft_organism,
    sft_selection,
    sft_smollm2,
    sft_time,
    smollm2_selection,
)

ROOT = Path(__file__).resolve().parents[1]
SIZES = ("steps", "probe_steps", "eval_examples", "pattern_examples", "train_pairs")
STAGE_MODEL = {"organism": "organism", "smollm2": "smollm2", "lora": "smollm2", "grouping": "smollm2"}


@dataclass(frozen=True, kw_only=True)
class Options(MultiTaskOptions):
    """Options of `experiments/sft_patterns.py`; the select stage's sizes default to `sft.SelectionConfig`'s."""

    stage: str = option(positional=True, choices=("organism", "smollm2", "lora", "select", "grouping"))
    """organism, smollm2 (lora: the same stage, on --model), select or grouping."""
    model: str = ""
    """The model (default: organism for the organism and select stages, smollm2 for smollm2, lora and grouping)."""
    threads: int | None = 1
    """torch CPU threads."""
    runs: str = str(ROOT / "runs")
    """Run folders (git-ignored)."""
    base: str = str(ROOT / "runs" / "organism_base")
    """The base organism (trained there when missing)."""
    targets: list[str] | None = None
    """select: target tasks (organism: 'a+b' is a composite task)."""
    candidates: list[str] | None = None
    """select: candidate (source) tasks."""
    k: int = 2
    """select: tasks per training set."""
    seeds: int = 2
    """select: SFT seeds of the selected and oracle sets."""
    draws: int = 3
    """select: random draws of k candidates (one seed each)."""
    probe_steps: int | None = None
    """select: steps of each task's probe SFT."""
    eval_examples: int | None = None
    """select: held-out target examples evaluated."""
    pattern_examples: int | None = None
    """select: held-out examples per probe pattern."""
    train_pairs: int | None = None
    """select: training pairs per task (the first)."""

    def __post_init__(self) -> None:
        # The stage's default model, set before the common checks (the options are frozen).
        object.__setattr__(self, "model", self.model or STAGE_MODEL.get(self.stage, "organism"))
        super().__post_init__()


def run(xp: Experiment, o: Options) -> str | None:
    start, where = time.perf_counter(), dict(runs=o.runs, seed=o.seed)
    if o.stage == "grouping":
        table = sft_grouping(xp)
        return None if table is None else table.to_string(index=False)
    if o.stage == "organism":
        stage, settings = "organism", sft_organism(xp, base=o.base, steps=o.steps or 200, **where)
    elif o.stage in ("smollm2", "lora"):
        stage = "smollm2" if o.model == "smollm2" else f"lora ({o.model})"
        settings = sft_smollm2(xp, o.tasks, steps=o.steps or 200, masks=o.masks, **where)
        settings |= {"seed": o.seed}
    else:
        sizes = {k: getattr(o, k) for k in SIZES if getattr(o, k) is not None}
        preset = organism_selection if xp.is_organism else smollm2_selection
        # The study records the model it ran on (the SmolLM2 preset serves any non-organism model).
        config = preset(model=o.model, k=o.k, seeds=o.seeds, draws=o.draws, seed=o.seed, **sizes)
        picked = dict(candidates=o.candidates, targets=o.targets)
        stage, settings = f"select ({o.model})", sft_selection(xp, config, base=o.base, runs=o.runs, **picked)
        settings |= {"seeds": o.seeds, "draws": o.draws}
    sft_time(xp, stage, time.perf_counter() - start, settings)
    return f"{stage}: {settings}"


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
