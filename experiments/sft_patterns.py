"""The SFT activation-pattern paper's experiments (Zhao, Du et al.) on the organism and on SmolLM2.

    python experiments/sft_patterns.py organism   # base organism -> instruction SFT on every task + composites
    python experiments/sft_patterns.py smollm2    # LoRA SFT of SmolLM2-135M-Instruct on function-vector tasks
    python experiments/sft_patterns.py select     # pattern-guided data selection (Tables 2/3), --model organism|smollm2
    python experiments/sft_patterns.py grouping   # Fig. 2's grouping test again, from a stored correlation matrix

The measurements are `headsup_lens.sft`'s; experiments/README.md lists the files written to `--out`.
Run folders go to `--runs` (git-ignored): a rerun resumes. Wall times are appended to `sft_times.csv`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import simple_parsing
import torch
from _common import figure_root

import headsup_lens as hl
from headsup_lens import plots, sft

ROOT = Path(__file__).resolve().parents[1]
SELECTION_SIZES = ("steps", "probe_steps", "eval_examples", "pattern_examples", "train_pairs")


@dataclass
class Options:
    """Options of `experiments/sft_patterns.py`; the select stage's sizes default to `sft.SelectionConfig`'s."""

    stage: str = simple_parsing.field(positional=True, choices=("organism", "smollm2", "select", "grouping"))
    out: str | None = None  # output folder (default: figures/<stage>; select: figures/<model>)
    runs: str = str(ROOT / "runs")  # run folders (git-ignored)
    base: str = str(ROOT / "runs" / "organism_base")  # the base organism (trained there when missing)
    tasks: list[str] | None = None  # smollm2 stage: function-vector tasks (default: sft.SMOLLM2_TASKS)
    steps: int | None = None  # SFT steps (organism, smollm2: 200; select: the compared runs')
    masks: str | None = None  # smollm2 stage: the Heads-up masks <task>.safetensors (default: <out>/masks)
    seed: int = 0  # SFT seed (select: of the probe runs and the random draws)
    threads: int = 1  # torch CPU threads
    model: str = simple_parsing.field(default="organism", choices=("organism", "smollm2"))  # select: the model
    targets: list[str] | None = None  # select: target tasks (organism: 'a+b' is a composite task)
    candidates: list[str] | None = None  # select: candidate (source) tasks
    k: int = 2  # select: tasks per training set
    seeds: int = 2  # select: SFT seeds of the selected and oracle sets
    draws: int = 3  # select: random draws of k candidates (one seed each)
    probe_steps: int | None = None  # select: steps of each task's probe SFT
    eval_examples: int | None = None  # select: held-out target examples evaluated
    pattern_examples: int | None = None  # select: held-out examples per probe pattern
    train_pairs: int | None = None  # select: training pairs per task (the first)
    no_png: bool = False  # write HTML figures only


def write_run(o: Options, out: Path, result: sft.FinetuneResult, config: sft.FinetuneConfig) -> None:
    """Table 1, accuracy, Fig. 2's change correlation and Fig. 5's dynamics of one run."""
    tables = sft.run_tables(result, n_examples=config.pattern_examples, seed=o.seed)
    for key, stem in (("table1", "table1"), ("accuracy", "accuracy"), ("dynamics", "fig5_dynamics")):
        plots.save_table(tables[key], out / f"sft_{stem}.csv")
    plots.save_table(tables["change_correlation"], out / "sft_fig2_change_correlation.csv", index=True)
    figure = plots.change_correlation_figure(tables["change_correlation"])
    plots.save_figure(figure, out / "sft_fig2_change_correlation", png=not o.no_png, root=figure_root(out))
    figure = plots.pattern_dynamics_figure(tables["dynamics"], list(tables["change_correlation"].index))
    plots.save_figure(figure, out / "sft_fig5_dynamics", png=not o.no_png, root=figure_root(out))


def organism(o: Options, out: Path) -> tuple[str, dict]:
    model = hl.load_model(str(sft.base_organism(o.base, threads=o.threads)), dtype="float32")
    names = [f"organism/{n}" for n in hl.organism.TASK_NAMES] + [f"organism/{a}+{b}" for a, b in sft.COMPOSITES]
    config = sft.organism_sft_config(o.steps or 200, o.seed)
    tasks = [hl.load_task(n) for n in names]
    result = sft.finetune_(model, tasks, config, out_dir=Path(o.runs) / f"organism_sft_seed{o.seed}")
    write_run(o, out, result, config)
    fits = sft.composition_fits(sft.run_changes(result), sft.COMPOSITES, prefix="organism/", seed=o.seed)
    plots.save_table(fits, out / "sft_composition.csv")
    return "organism", {k: getattr(config, k) for k in ("steps", "batch_size", "lr", "method")}


def grouping(o: Options, out: Path) -> None:
    table = sft.task_grouping(pd.read_csv(out / "sft_fig2_change_correlation.csv", index_col=0), sft.SMOLLM2_GROUPS)
    if table is not None:
        plots.save_table(table, out / "sft_fig2_grouping.csv")


def smollm2(o: Options, out: Path) -> tuple[str, dict]:
    model = hl.load_model("smollm2", dtype="float32")
    tasks = [hl.load_task(n) for n in o.tasks or sft.SMOLLM2_TASKS]
    config = sft.smollm2_sft_config(o.steps or 200, o.seed)
    result = sft.finetune_(model, tasks, config, out_dir=Path(o.runs) / f"smollm2_sft_seed{o.seed}")
    scores, shown = sft.held_out_outputs(model, tasks, config.pattern_examples, instructed=config.instructed)
    plots.save_table(shown, out / "sft_generations.csv")
    plots.save_table(scores, out / "sft_final_scores.csv")
    write_run(o, out, result, config)
    grouping(o, out)
    paths = {t.name: Path(o.masks or out / "masks") / f"{hl.training.safe_name(t.name)}.safetensors" for t in tasks}
    masks = {name: hl.HeadMask.load(path) for name, path in paths.items() if path.is_file()}
    plots.save_table(sft.mask_overlap(sft.run_changes(result), masks), out / "sft_mask_overlap.csv")
    recipe = ("steps", "batch_size", "lr", "method", "lora_rank", "lora_alpha", "lora_targets", "instructed")
    return "smollm2", {k: getattr(config, k) for k in recipe}


def select(o: Options, out: Path) -> tuple[str, dict]:
    sizes = {k: getattr(o, k) for k in SELECTION_SIZES if getattr(o, k) is not None}
    preset = sft.SelectionConfig.organism if o.model == "organism" else sft.SelectionConfig.smollm2
    config = preset(k=o.k, seeds=o.seeds, draws=o.draws, seed=o.seed, **sizes)
    if o.model == "organism":
        load = sft.reloading(hl.load_model(str(sft.base_organism(o.base, threads=o.threads)), dtype="float32"))
        resolve = lambda name: hl.load_task(f"organism/{name.removeprefix('organism/')}")  # noqa: E731
    else:
        load, resolve = (lambda: hl.load_model("smollm2", dtype="float32")), hl.load_task
    candidates = [resolve(n) for n in o.candidates or config.candidates]
    targets = [resolve(n) for n in o.targets or config.targets]
    result = sft.data_selection(load, candidates, targets, config, Path(o.runs) / f"{o.model}_sft_selection", log=print)
    for name, table in (("_ranking", result.ranking), ("_runs", result.runs), ("_generations", result.generations)):
        plots.save_table(table, out / f"sft_data_selection{name}.csv")
    plots.save_table(sft.selection_summary(result.runs), out / "sft_data_selection.csv")
    plots.save_table(sft.similarity_vs_loss(result.runs), out / "sft_data_selection_similarity.csv")
    plots.save_figure(
        plots.data_selection_figure(result.runs), out / "sft_data_selection", png=not o.no_png, root=figure_root(out)
    )
    settings = {k: v for k, v in config.settings([t.name for t in candidates]).items() if k != "probe"}
    return f"select ({o.model})", settings | {"seeds": o.seeds, "draws": o.draws}


def main(argv: list[str] | None = None) -> None:
    o = simple_parsing.parse(Options, args=argv, add_option_string_dash_variants=simple_parsing.DashVariant.DASH)
    torch.set_num_threads(o.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(o.out or ROOT / "figures" / {"select": o.model, "grouping": "smollm2"}.get(o.stage, o.stage))
    start = time.perf_counter()
    timed = {"organism": organism, "smollm2": smollm2, "select": select, "grouping": grouping}[o.stage](o, out)
    if timed is not None:  # one row more in sft_times.csv
        row = {"stage": timed[0], "wall_s": round(time.perf_counter() - start, 1), "threads": torch.get_num_threads()}
        old = pd.read_csv(out / "sft_times.csv") if (out / "sft_times.csv").is_file() else pd.DataFrame()
        row = pd.DataFrame([{**row, "settings": json.dumps(timed[1])}])
        plots.save_table(pd.concat([old, row], ignore_index=True), out / "sft_times.csv")


if __name__ == "__main__":
    main()
