"""Regenerate every reproduction artifact (default: on the built-in organism, into the git-ignored
outputs/experiments/organism/; `--update-figures` writes the committed figures/organism/ instead).

    python experiments/run_all.py                       # the organism, ~5 min on a CPU
    python experiments/run_all.py --update-figures      # refresh the committed figures/
    python experiments/run_all.py --model meta-llama/Llama-3.1-8B-Instruct --task antonym \\
        --tasks antonym capitalize_first_letter sentiment --data-dir /path/to/data --device cuda

Options not listed here are passed to every script (see `python experiments/<script>.py --help`).
Scripts run in one process in the order below, so masks trained by the first are reused by the rest.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from headsup_lens.options import parse_known

# Tables 1/2 first: it trains the default-init masks of every task, which the figures reuse.
SCRIPTS = (
    "tables12_evaluation",
    "fig2_removal_ranks",
    "fig3_trajectories",
    "fig4_similarity",
    "fig5_sweep_similarity",
    "fig6_alpha_grid",
    "table4_logit_lens",
    "fig8_influence_order",
    "table5_jaccard",
    "fig9_negative_init",
    "table6_pathway_ablation",
    "query_gate",
    "table7_attention_on_target",
)
MULTI_TASK = {"tables12_evaluation", "table5_jaccard", "table6_pathway_ablation"}
# Table 7 needs a pick-one-of-three-words task, which the organism does not have.
NEEDS_THREE_WORD_TASK = {"table7_attention_on_target"}


@dataclass
class Options:
    """Options of run_all (every other option goes to each script)."""

    only: list[str] | None = None
    """Run only these scripts."""
    tasks: list[str] | None = None
    """Tasks of the multi-task scripts."""
    three_word_task: str | None = None
    """Task for Table 7 (e.g. fruit_v_animal_3); skipped without it."""


def main(argv: list[str] | None = None) -> None:
    options, _, shared = parse_known(Options, argv, prog="run_all.py", description=__doc__)
    unknown = sorted(set(options.only or ()) - set(SCRIPTS))
    if unknown:
        raise SystemExit(f"run_all: error: --only {unknown} are not scripts; choose from {', '.join(SCRIPTS)}")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts beside this one
    start, timings = time.perf_counter(), []
    for name in options.only or SCRIPTS:
        argv_script = list(shared) + (["--tasks", *options.tasks] if name in MULTI_TASK and options.tasks else [])
        if name in NEEDS_THREE_WORD_TASK:
            if options.three_word_task is None:
                print(f"=== {name}: skipped (needs --three-word-task; the organism has no such task)")
                continue
            argv_script += ["--task", options.three_word_task]
        print(f"=== {name} {' '.join(argv_script)}", flush=True)
        t0 = time.perf_counter()
        importlib.import_module(name).main(argv_script)
        timings.append((name, time.perf_counter() - t0))
    for name, seconds in timings:
        print(f"{name:28s} {seconds:6.1f} s")
    print(f"all done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
