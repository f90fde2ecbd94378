"""The paper's translation experiments (Table 1, Fig. 2, Table 8) on SmolLM2-135M-Instruct.

Stages writing to `<out>/smollm2/translation/` (`--update-figures`: the committed `figures/smollm2/translation/`):

    python experiments/translation.py scan --update-figures                       # instructed en -> each language, small sample
    python experiments/translation.py train --pairs en-fr en-es --update-figures  # masks without instruction (TrainConfig.fast)
    python experiments/translation.py analyze --pairs en-fr en-es --update-figures   # Table 1 rows, Fig. 2, Table 8

`scan` generates (instructed, greedy) for the first `--scan-n` training pairs of every direction
en -> xx (`scan_generations.csv`, resumable per direction) and scores them (`scan.csv`: target-language
share, the paper's ROUGE-L, BLEU). `train` trains one mask per direction (resumable from its run folder
under `--runs`, git-ignored) and keeps the final masks in `masks/`. `analyze` evaluates the stored masks
on the 100 held-out pairs (`evaluate`, resuming from the settings an interrupted run finished) and runs
the removal sweeps (each skipped when its file exists). Every stage appends its wall times to
`times.csv`. The steps live in `headsup_lens.reproduce` (`scan_translation`, `table1_rows`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headsup_lens.options import option
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script
from headsup_lens.reproduce._translation import (
    SCAN_TARGETS,
    fig2_sweeps,
    scan_translation,
    table1_rows,
    table8_rows,
    train_translation_masks,
)

STAGES = ("scan", "train", "analyze")
PARTS = ("table1", "fig2", "table8")


@dataclass(frozen=True, kw_only=True)
class Options(ExperimentOptions):
    """Options of the translation stages."""

    stage: str = option(positional=True, choices=STAGES)
    """scan, train or analyze."""
    pairs: list[str] | None = None
    """Directions src-tgt (scan: default en-fr en-de en-es en-zh en-ru en-ar; train, analyze: required)."""
    model: str = "smollm2"
    """Model: `smollm2` (SmolLM2-135M-Instruct), a `.gguf` file, a hub name or a local directory."""
    schedule: str = "fast"
    """train: mask schedule (TrainConfig.fast: 300 steps, batch 16 per task), fast or paper."""
    threads: int | None = 1
    """torch CPU threads."""
    eval_batch_size: int = 32
    """Examples per forward pass / generation."""
    checkpoint_every: int = 10
    """train: save the resume state every this many steps (a step takes minutes on a loaded CPU)."""
    runs: str = str(Path(__file__).resolve().parents[1] / "runs" / "smollm2_translation")
    """train: run folders with checkpoints (git-ignored)."""
    scan_n: int = 30
    """scan: training pairs per direction."""
    alpha: float = 0.25
    """analyze: alpha of the instructed + scaled mask row."""
    parts: list[str] | None = None
    """analyze: which artifacts, of table1 fig2 table8 (default: all)."""
    new_tokens: int = 20
    """analyze: greedy tokens per removal-sweep step."""
    iwslt_n: int = 100
    """analyze: IWSLT 2017 test pairs for Table 8 (the first)."""
    table8_alpha: float | None = None
    """analyze: alpha of Table 8's masked row (default: the paper's per direction: en-de 0.3, en-fr 0.2, en-zh 0.1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if set(self.parts or ()) - set(PARTS):
            raise ValueError(f"parts must be among {', '.join(PARTS)}, not {' '.join(self.parts or ())}")
        if self.stage != "scan" and not self.pairs:
            raise ValueError(f"{self.stage}: --pairs is required")


def run(xp: Experiment, o: Options):
    parts = o.parts or list(PARTS)
    if o.stage == "scan":
        pairs = o.pairs or [f"en-{t}" for t in SCAN_TARGETS]
        return scan_translation(xp, pairs, n=o.scan_n, batch_size=o.eval_batch_size, data_dir=o.data_dir)
    assert o.pairs  # required with every stage but scan (checked with the options)
    if o.stage == "train":
        train_translation_masks(xp, o.pairs, xp.train_config(), o.runs, data_dir=o.data_dir)
        return None
    shown = []
    for pair in o.pairs:
        if "table1" in parts:
            shown.append(table1_rows(xp, pair, alpha=o.alpha, batch_size=o.eval_batch_size, data_dir=o.data_dir))
        if "fig2" in parts:
            fig2_sweeps(xp, pair, new_tokens=o.new_tokens, title="SmolLM2", data_dir=o.data_dir)
        if "table8" in parts:
            limits = dict(n=o.iwslt_n, alpha=o.table8_alpha, batch_size=o.eval_batch_size)
            shown.append(table8_rows(xp, pair, **limits, data_dir=o.data_dir))
    return "\n\n".join(table.to_string(index=False) for table in shown) or None


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
