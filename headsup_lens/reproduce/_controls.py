"""The controls a verdict needs, as stages over a model's stored masks (`experiments/smollm2.py
controls` and `cross-task`): many random masks per task (`random_masks_<task>.csv`), Fig. 2 as switch
rates over every held-out input (`fig2_switch_rates_<task>.csv`), Fig. 6 with per-example losses and
random head sets (`fig6_alpha_control_<task>.csv`), and each task's mask evaluated on every other task
(`cross_task_<task>.csv`, combined into `cross_task.csv`). Each artifact is written once per task and
skipped when present, so an interrupted stage resumes task by task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from .._io import read_table
from ..analysis import AlphaControl, SwitchRates, alpha_control, switch_rates
from ..analysis._switch import Baseline
from ..data import Task
from ..evaluation import (
    EvalConfig,
    RandomMaskControl,
    evaluate,
    fluent_random_mask_control,
    neutral_rows,
    random_mask_control,
)
from ..evaluation._plan import AnalysisPlan
from ..masks import HeadMask
from ..plots import cross_task_figure
from ..training import safe_name
from ._experiment import Experiment, timed
from ._masks import mask_on_another_task

CROSS_COLUMNS = ("mask_task", "task", "n_kept", "n_examples", "accuracy", "strict", "strict_low", "strict_high")
CROSS_COLUMNS += ("answer_nll", "echo", "empty")


def _done(xp: Experiment, name: str, redo: bool) -> bool:
    done = xp.current(name).exists() and not redo
    if done:
        print(f"{name}: present (--redo to compute it again)", flush=True)
    return done


def random_masks_stage(
    xp: Experiment, task: Task, mask: HeadMask, *, n_draws: int, batch_size: int, redo: bool = False, seed: int = 0
) -> None:
    """`random_masks_<task>.csv`: the learned mask and `n_draws` random masks with its per-layer
    counts (`random_mask_control`), one row each, and every output behind them
    (`random_masks_generations_<task>.csv.gz`); the summary `random_masks_summary_<task>.csv`. For
    another seed's mask (`seed` k > 0) the same tables named `random_masks_seed<k>_<task>.csv`, ...
    (the verdicts read them; the combined summary gives each its `seed`)."""
    stem = safe_name(task.name) if seed == 0 else f"seed{seed}_{safe_name(task.name)}"
    if _done(xp, f"random_masks_{stem}.csv", redo):
        return
    what = f"{task.name}{'' if seed == 0 else f' (seed {seed})'}: {n_draws} random masks"
    with timed(xp.out, "controls", what):
        control = random_mask_control(xp.model, task, mask, EvalConfig(batch_size=batch_size), n_draws=n_draws)
        xp.table(control.draws.assign(within=control.within), f"random_masks_{stem}", float_format=None)
        xp.table(control.generations, f"random_masks_generations_{stem}", float_format=None, compress=True)
        xp.table(control.summary(), f"random_masks_summary_{stem}", float_format=None)


def fluent_random_masks_stage(
    xp: Experiment,
    task: Task,
    mask: HeadMask,
    plan: AnalysisPlan,
    *,
    n_draws: int,
    batch_size: int,
    redo: bool = False,
    seed: int = 0,
    data_dir: str | None = None,
) -> None:
    """`random_masks_fluent_<task>.csv`: the learned mask and `n_draws` random masks of its per-layer shape
    that keep the neutral text's loss within the plan's tolerance of the learned mask's
    (`fluent_random_mask_control`, the plan's `[controls]`), their outputs
    (`random_masks_fluent_generations_<task>.csv.gz`) and summary; `seed` k > 0: another seed's mask,
    `random_masks_fluent_seed<k>_<task>.csv`. The random control of the plan's verdicts reads them."""
    stem = safe_name(task.name) if seed == 0 else f"seed{seed}_{safe_name(task.name)}"
    if _done(xp, f"random_masks_fluent_{stem}.csv", redo):
        return
    c = plan.controls
    what = f"{task.name}{'' if seed == 0 else f' (seed {seed})'}: {n_draws} fluency-kept random masks"
    with timed(xp.out, "controls", what):
        neutral = neutral_rows(xp.model, c.neutral_text, c.neutral_examples, task=task.name, data_dir=data_dir)
        control = fluent_random_mask_control(
            xp.model,
            task,
            mask,
            neutral,
            EvalConfig(batch_size=batch_size),
            n_draws=n_draws,
            pool=c.pool,
            tolerance=c.fluency_tolerance,
            max_candidates=c.max_candidates,
        )
        xp.table(control.draws.assign(within=control.within), f"random_masks_fluent_{stem}", float_format=None)
        xp.table(control.generations, f"random_masks_fluent_generations_{stem}", float_format=None, compress=True)
        xp.table(control.summary(), f"random_masks_fluent_summary_{stem}", float_format=None)


SWITCH_TABLES = {
    "random": ("fig2_switch_rates", "fig2_switch_summary"),
    "shuffled": ("fig2_order_rates", "fig2_order_summary"),
}
"""The tables of `switch_rates_stage` by baseline: a random order of every head, or of the mask's own."""


def switch_rates_stage(
    xp: Experiment, task: Task, mask: HeadMask, *, stride: int, baseline: Baseline = "random", redo: bool = False
) -> None:
    """`fig2_switch_rates_<task>.csv` (every held-out input, weight and random order, up to the
    mask's own number of removed heads, every `stride`-th step) and its summary; with
    `baseline="shuffled"`, `fig2_order_rates_<task>.csv` against a random order of the same heads."""
    stem = safe_name(task.name)
    table, summary = SWITCH_TABLES[baseline]
    if _done(xp, f"{table}_{stem}.csv", redo):
        return
    what = f"{task.name}: switch rates{'' if baseline == 'random' else ' (same heads shuffled)'} (stride {stride})"
    with timed(xp.out, "controls", what):
        rates = switch_rates(xp.model, task, mask, stride=stride, baseline=baseline, progress_bar=xp.options.progress)
        xp.table(rates.table.assign(task=task.name), f"{table}_{stem}", float_format=None)
        xp.table(rates.summary(), f"{summary}_{stem}", float_format=None)


def alpha_control_stage(
    xp: Experiment, task: Task, mask: HeadMask, *, n_random: int, batch_size: int, redo: bool = False
) -> None:
    """`fig6_alpha_control_<task>.csv` (`alpha_control`: per-example instructed loss over the alpha grid
    and `n_random` random head sets at the tested alpha) and its summary."""
    stem = safe_name(task.name)
    if _done(xp, f"fig6_alpha_control_{stem}.csv", redo):
        return
    if task.instruction is None:
        print(f"{task.name}: no instruction, no instructed loss to scale", flush=True)
        return
    with timed(xp.out, "controls", f"{task.name}: alpha control"):
        progress = xp.options.progress
        control = alpha_control(xp.model, task, mask, n_random=n_random, batch_size=batch_size, progress_bar=progress)
        table = control.table.assign(task=task.name, alpha_test=control.alpha_test, n_scaled=control.n_scaled)
        xp.table(table, f"fig6_alpha_control_{stem}", float_format=None)
        xp.table(control.summary(), f"fig6_alpha_summary_{stem}", float_format=None)


def cross_task_stage(
    xp: Experiment,
    tasks: Sequence[Task],
    masks: Mapping[str, HeadMask],
    *,
    batch_size: int,
    redo: bool = False,
    title: str,
) -> pd.DataFrame:
    """Every task's mask on every task's held-out inputs, no instruction (the "masked" setting):
    `cross_task_<mask task>.csv` per mask (the own task's row included, so each file is one
    comparison), then `cross_task.csv` over every mask file present and its heat map. A mask of
    another task that scores like the own one points to a shared component (e.g. "answer tersely")
    rather than a task's pathway."""
    config = EvalConfig(batch_size=batch_size, settings=("masked",), progress=False)
    for source in tasks:
        stem = safe_name(source.name)
        if _done(xp, f"cross_task_{stem}.csv", redo):
            continue
        rows, texts = [], []
        with timed(xp.out, "cross-task", f"{source.name} mask on {len(tasks)} tasks"):
            for target in tasks:
                with mask_on_another_task():
                    result = evaluate(xp.model, target, masks[source.name], config)
                row = result.table.loc[result.table.setting == "masked"].iloc[0]
                shared = {c: row[c] for c in CROSS_COLUMNS if c in row and c != "mask_task"}
                rows.append({"mask_task": source.name, **shared})
                texts.append(result.generations.assign(mask_task=source.name))
                print(f"{source.name} mask on {target.name}: strict {row.strict:.2f}", flush=True)
            xp.table(pd.DataFrame(rows), f"cross_task_{stem}", float_format=None)
            generations = pd.concat(texts, ignore_index=True)
            xp.table(generations, f"cross_task_generations_{stem}", float_format=None, compress=True)
    per_mask = [p for p in xp.files("cross_task_*.csv") if not p.name.startswith("cross_task_generations")]
    parts = [read_table(path) for path in per_mask]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(CROSS_COLUMNS))
    xp.table(table, "cross_task", float_format=None)
    if len(table):
        xp.figure(
            cross_task_figure(table, title=f"{title}: each task's mask on every task (strict accuracy)"), "cross_task"
        )
    return table


def _mask_seed(path: Path, artifact: str) -> int:
    """The seed of the mask a control table was drawn for: k in `<artifact>_seed<k>_<task>.csv`, else 0."""
    found = re.match(rf"{artifact}_seed(\d+)_", path.name)
    return int(found.group(1)) if found else 0


def combine_controls(xp: Experiment) -> list[str]:
    """The summaries of the controls over every task present, computed again from the per-task tables
    (`random_masks_<task>.csv`, `fig2_switch_rates_<task>.csv`, `fig6_alpha_control_<task>.csv`):
    `random_masks_summary.csv`, `fig2_switch_summary.csv` and `fig6_alpha_summary.csv`, what the results
    pages show. The random masks of every seed's mask are summarised, with the mask's `seed` (0 for
    `random_masks_<task>.csv`, k for `random_masks_seed<k>_<task>.csv`). The names of the tables written."""

    def random(t):
        return RandomMaskControl(str(t.task.iloc[0]), str(t.within.iloc[0]), t, pd.DataFrame()).summary()

    summaries = {
        "random_masks": ("random_masks_summary", random),
        "random_masks_fluent": ("random_masks_fluent_summary", random),
        "fig2_switch_rates": ("fig2_switch_summary", lambda t: SwitchRates(str(t.task.iloc[0]), t).summary()),
        "fig2_order_rates": ("fig2_order_summary", lambda t: SwitchRates(str(t.task.iloc[0]), t).summary()),
        "fig6_alpha_control": (
            "fig6_alpha_summary",
            lambda t: AlphaControl(
                str(t.task.iloc[0]), float(t.alpha_test.iloc[0]), int(t.n_scaled.iloc[0]), t
            ).summary(),
        ),
    }
    written = []
    for artifact, (name, summarize) in summaries.items():
        skip = (f"{artifact}_summary", f"{artifact}_generations")
        skip += ("random_masks_fluent",) if artifact == "random_masks" else ()  # a table of its own
        paths = [p for p in xp.files(f"{artifact}_*.csv") if not p.name.startswith(skip)]
        parts = []
        for path in sorted(paths, key=lambda p: (_mask_seed(p, artifact), p.name)):
            part = summarize(read_table(path, keep_default_na=False, na_values=[""]))
            parts.append(part.assign(seed=_mask_seed(path, artifact)) if artifact.startswith("random_masks") else part)
        if parts:
            xp.table(pd.concat(parts, ignore_index=True), name, float_format=None)
            written.append(name)
    return written


def controls_stage(
    xp: Experiment,
    tasks: Sequence[Task],
    masks: Mapping[str, HeadMask],
    controls: Sequence[str],
    *,
    seed: int = 0,
    draws: int = 20,
    stride: int = 1,
    random_sets: int = 20,
    batch_size: int = 64,
    redo: bool = False,
    data_dir: str | None = None,
) -> None:
    """The controls named in `controls` (`random-masks`, `fluent-random-masks`, `switch-rates`,
    `order-rates`, `alpha-control`) for each task's mask, skipping what is present, then the combined
    summaries. Another seed's mask (`seed` > 0) gets its own random masks only: the other controls
    analyse the seed-0 mask."""
    from ._verdicts import nearest_plan

    for task in tasks:
        mask = masks[task.name]
        if "random-masks" in controls:
            random_masks_stage(xp, task, mask, n_draws=draws, batch_size=batch_size, redo=redo, seed=seed)
        if "fluent-random-masks" in controls:
            plan = nearest_plan(xp.out)
            fluent_random_masks_stage(
                xp, task, mask, plan, n_draws=draws, batch_size=batch_size, redo=redo, seed=seed, data_dir=data_dir
            )
        if seed:
            continue
        if "switch-rates" in controls:
            switch_rates_stage(xp, task, mask, stride=stride, redo=redo)
        if "order-rates" in controls:
            switch_rates_stage(xp, task, mask, stride=stride, baseline="shuffled", redo=redo)
        if "alpha-control" in controls:
            alpha_control_stage(xp, task, mask, n_random=random_sets, batch_size=batch_size, redo=redo)
    combine_controls(xp)
