"""The paper's experiments on a real instruction-tuned LLM, SmolLM2-135M-Instruct (30 layers x 9 heads);
`--model gemma3-270m` runs the same stages on the base model Gemma-3-270M (outputs in `gemma3-270m/`).

Stages over the masks stored in `<out>/smollm2/masks/` (`--update-figures`: the committed `figures/smollm2/`):

    python experiments/smollm2.py select --update-figures   # greedy accuracy of the 35 function-vector tasks, with and without instruction
    python experiments/smollm2.py train --tasks antonym sentiment --seed 0 --update-figures   # masks/<task>[_seed<k>].safetensors
    python experiments/smollm2.py analyze --tasks antonym sentiment --update-figures           # everything else, from the stored masks
    python experiments/smollm2.py evaluate --tasks antonym --update-figures                   # only the settings tables (Tables 1/2)
    python experiments/smollm2.py fewshot --tasks antonym --update-figures                    # the same masks on 5-shot prompts: the few-shot baseline (Table 3)
    python experiments/smollm2.py rescore --update-figures    # the stored settings tables scored again from their generations
    python experiments/smollm2.py combine --update-figures    # only the combined tables
    python experiments/smollm2.py controls --tasks antonym --update-figures   # 20 random masks, Fig. 2 switch rates, Fig. 6 with controls
    python experiments/smollm2.py controls --tasks ag_news --controls random-masks --update-figures   # only the random masks
    python experiments/smollm2.py cross-task --tasks antonym sentiment --update-figures   # each task's mask on every task
    python experiments/smollm2.py verdicts --tasks antonym --update-figures   # a verdict per claim, from the stored tables

`select` writes `task_selection.csv` / `.md` (resumable: `task_selection_long.csv` keeps each result at
once). `train` (`TrainConfig.fast`, one pass for all tasks, checkpoints under `--runs`, git-ignored)
keeps only the final masks. `analyze` never trains: the settings table (Tables 1/2), removal sweeps by
weight and random order (Fig. 2), similarity to the instructed run (Fig. 4), logit lens (Table 41) and
the alpha grid (Fig. 6) per task, then the combined tables, Table 5 and the mask heat map. `evaluate`
redoes only the settings tables (a task whose generations are stored is skipped, except for the rows of
seed masks stored since). `fewshot` evaluates each task's stored mask on `--shots`-shot prompts beside
the few-shot baseline (demonstrations, no instruction, no mask): `fewshot_evaluation_<task>.csv`, all
tasks in `fewshot_evaluation.csv`.
`controls` writes, per task and skipping what is present, the controls the verdicts need
(`reproduce._controls`): `--draws` random masks with the mask's per-layer counts
(`random_masks_<task>.csv`), Fig. 2 as switch rates over every held-out input
(`fig2_switch_rates_<task>.csv`) and Fig. 6 with per-example losses and `--random-sets` random head sets
(`fig6_alpha_control_<task>.csv`). `cross-task` evaluates each task's mask on every task
(`cross_task.csv`). `verdicts` judges each claim of the paper by a stated rule on the stored tables,
with the budget of each mask (`reproduce._verdicts`): `verdicts.csv`. Each stage appends its wall times to `<out>/smollm2/times.csv`. The steps
live in `headsup_lens.reproduce` (`select_tasks`, `train_stored_masks`, `settings_table`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headsup_lens.data import FV_TASKS, fewshot, load_task
from headsup_lens.masks import HeadMask
from headsup_lens.options import check_counts, option
from headsup_lens.reproduce import Experiment, MultiTaskOptions, run_script, stored_mask_path
from headsup_lens.reproduce._controls import (
    combine_controls,
    controls_stage,
    cross_task_stage,
)
from headsup_lens.reproduce._staged import (
    add_seed_rows,
    analyze_task,
    combine_fewshot,
    combine_tables,
    fewshot_table,
    rescore_stored,
    seed0_tasks,
    seed_masks,
    select_tasks,
    settings_table,
    train_stored_masks,
)
from headsup_lens.reproduce._verdicts import claim_verdicts
from headsup_lens.training import safe_name

STAGES = (
    "select",
    "train",
    "analyze",
    "evaluate",
    "fewshot",
    "rescore",
    "combine",
    "controls",
    "cross-task",
    "verdicts",
)
CONTROLS = ("random-masks", "fluent-random-masks", "switch-rates", "order-rates", "alpha-control")
SHOWN = ["task", "setting", "n_kept", "n_examples", "answer_nll", "accuracy"]
CROSS_SHOWN = ["mask_task", "task", "strict", "answer_nll"]


@dataclass(frozen=True, kw_only=True)
class Options(MultiTaskOptions):
    """Options of the SmolLM2 stages."""

    stage: str = option(positional=True, choices=STAGES)
    """select, train, analyze, evaluate, fewshot, rescore, combine, controls, cross-task or verdicts."""
    model: str = "smollm2"
    """Model: `smollm2` (SmolLM2-135M-Instruct), a `.gguf` file, a hub name or a local directory."""
    schedule: str = "fast"
    """train: mask schedule (TrainConfig.fast: 300 steps, batch 16 per task), fast or paper."""
    threads: int | None = 1
    """torch CPU threads (default 1: on a shared 2-core machine 2 threads measured slower)."""
    runs: str = str(Path(__file__).resolve().parents[1] / "runs" / "smollm2")
    """train: run folders with checkpoints (git-ignored)."""
    alpha: float = 0.25
    """Alpha of the instructed + scaled mask row."""
    new_tokens: int = 12
    """analyze: greedy tokens per removal-sweep step."""
    keep_settings: bool = False
    """analyze: keep a task's stored settings table (from `evaluate`) instead of evaluating it again."""
    shots: int = 5
    """fewshot: demonstrations before every held-out input (the paper's Table 3: 5)."""
    draws: int = 20
    """controls: random masks per task, each with the learned mask's number of kept heads in every layer."""
    stride: int = 1
    """controls: Fig. 2 switch rates sweep every `stride`-th step up to the mask's own number of removed heads."""
    controls: tuple[str, ...] = option(default=CONTROLS, choices=CONTROLS)
    """controls: which controls to compute. Switch rates and the alpha control are judged only where the mask
    elicits its task; `--controls random-masks` gives every other task its random-mask distribution."""
    random_sets: int = 5
    """controls: random head sets of the mask's size scaled at the tested alpha (Fig. 6's control)."""
    redo: bool = False
    """controls, cross-task: compute an artifact again although it is present."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, shots=1, draws=1, stride=1, random_sets=0)
        if self.stage == "controls" and self.seed and not {"random-masks", "fluent-random-masks"} & set(self.controls):
            raise ValueError("controls --seed draws only random masks (another seed's control); --controls omits them")
        if self.stage == "cross-task" and self.seed:  # cross_task.csv holds the seed-0 masks' swaps: never mix
            raise ValueError("cross-task swaps the seed-0 masks; --seed applies to the controls stage only")


def run(xp: Experiment, o: Options):
    data, batch = o.data_dir, o.eval_batch_size
    title = "SmolLM2" if o.model == "smollm2" else o.model
    if o.stage == "select":
        return select_tasks(xp, o.tasks or list(FV_TASKS), batch_size=batch, data_dir=data)
    if o.stage == "train":
        if not o.tasks:
            raise ValueError("train: --tasks is required")
        train_stored_masks(xp, [load_task(n, data) for n in o.tasks], xp.train_config(), o.runs)
        return None
    if o.stage == "fewshot":
        tasks = [load_task(name, data) for name in o.tasks or seed0_tasks(xp)]
        masks = [HeadMask.load(xp.current(f"masks/{stored_mask_path('', t).name}"), xp.model) for t in tasks]
        for task in tasks:  # every task's demonstrations before any evaluation: a refusal loses no work
            fewshot(task, k=o.shots, dev=0)
        for task, mask in zip(tasks, masks):
            fewshot_table(xp, task, mask, shots=o.shots, alpha=o.alpha, batch_size=batch)
        combine_fewshot(xp)  # fewshot_evaluation.csv: every task's few-shot rows
        return None
    if o.stage in ("controls", "cross-task"):
        names = o.tasks or seed0_tasks(xp)
        tasks = [load_task(n, data) for n in names]
        stored = {t.name: f"masks/{stored_mask_path('', t, seed=o.seed).name}" for t in tasks}
        masks = {name: HeadMask.load(xp.current(path), xp.model) for name, path in stored.items()}
        if o.stage == "cross-task":
            return cross_task_stage(xp, tasks, masks, batch_size=batch, redo=o.redo, title=title)[CROSS_SHOWN]
        controls_stage(
            xp,
            tasks,
            masks,
            o.controls,
            seed=o.seed,
            draws=o.draws,
            stride=o.stride,
            random_sets=o.random_sets,
            batch_size=batch,
            redo=o.redo,
            data_dir=data,
        )
        return None
    if o.stage == "verdicts":
        combine_controls(xp)
        verdicts = claim_verdicts(xp.out, data_dir=data)
        xp.table(verdicts, "verdicts", float_format=None)
        return verdicts[["task", "schedule", "examples", "claim", "verdict"]]
    if o.stage == "rescore":
        rescore_stored(xp, data)
        if not seed0_tasks(xp):  # a folder of tables without stored masks (the organism's): nothing to combine
            return None
    elif o.stage in ("analyze", "evaluate"):
        names, seeds = o.tasks or seed0_tasks(xp), seed_masks(xp)
        if not names:
            raise ValueError(f"{o.stage}: no stored masks in {xp.out / 'masks'}; run the train stage first")
        for name in names:
            task = load_task(name, data)
            done = xp.current(f"tables12_generations_{safe_name(task.name)}.csv").exists()
            if o.stage == "evaluate" and done:
                if not add_seed_rows(xp, task, seeds, alpha=o.alpha, batch_size=batch):
                    print(f"{name}: evaluated already", flush=True)
                continue
            mask = HeadMask.load(xp.current(f"masks/{stored_mask_path('', task).name}"), xp.model)
            if not (done and o.keep_settings):
                settings_table(xp, task, mask, seeds, alpha=o.alpha, batch_size=batch, stage=o.stage)
            if o.stage == "analyze":
                analyze_task(xp, task, mask, new_tokens=o.new_tokens, batch_size=batch, title=title)
    return combine_tables(xp, title=title)[SHOWN]


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
