"""The main job: train masks without instructions, evaluate them, and run every analysis on them.

On the built-in organism it also compares each learned mask with the task's planted pathway S_t.
Everything lands in one output folder: a self-contained `report.html` (plotly.js inlined once),
figures (HTML beside one shared plotly.min.js, and PNG), tables (CSV) and the masks. The report
explains every table and figure for a reader who has not read the paper.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from .._io import OutputSet, atomic_write, atomic_write_json
from .._progress import activity
from ..analysis import (
    RemovalSweep,
    Setting,
    influence_order,
    layer_similarity,
    logit_lens,
    pathway_recovery,
    random_order,
    removal_sweep,
    step_or_never,
    weight_order,
)
from ..data import Task, load_task
from ..evaluation import EvalConfig, evaluate
from ..masks import HeadMask
from ..models import load_model
from ..options import model_arguments
from ..organism import load_planted
from ..plots import (
    generation_table,
    logit_lens_figure,
    mask_heatmap,
    rank_figure,
    save_figure,
    similarity_figure,
)
from ..training import TrainConfig, resume_step, train_masks
from ._config import DEFAULT_TASKS as DEFAULT_TASKS
from ._config import DemoConfig, stored_mask_files
from ._report import Report, format_p_value


@dataclass
class DemoResult:
    """What `run_demo` produced: the output folder `out` (with `report.html`), the per-task `summary`
    table, the `evaluations` table (one row per task and setting), the removal `sweeps` by order name
    (`weight order`, `influence order`, `random order`) and the wall-clock `seconds`.
    """

    out: Path
    summary: pd.DataFrame
    evaluations: pd.DataFrame
    sweeps: dict[str, RemovalSweep]
    seconds: float


def planted_pathways(model_name: str, model) -> dict[str, list[tuple[int, int]]] | None:
    """S_t per task when the model is the built-in organism, else None."""
    if model_name != "organism":
        return None

    return {f"organism/{name}": heads for name, heads in load_planted().items()}


def _percent(value: float | None, n: int) -> str:
    """An accuracy as a percentage with its count, e.g. `87% (87/100)` (one unit: a table cell breaks
    around it, not inside it)."""
    if value is None or pd.isna(value):
        return "—"
    return f"{100 * value:.0f}%\u00a0({round(value * n)}/{n})"


def _multi_word(task: Task) -> bool:
    """Whether the task's answers are phrases: ROUGE-L and BLEU mean something only then."""
    answers = [answer for _, answer in task.eval_pairs]
    return bool(answers) and sum(len(a.split()) for a in answers) / len(answers) > 1.5


@dataclass
class _Page:
    """The report under way, and its figures as they are saved (HTML, and PNG unless `png` is off)."""

    report: Report
    folder: Path
    png: bool
    pngs: list[Path] = field(default_factory=list)
    png_errors: set[str] = field(default_factory=set)

    def figure(self, fig, name: str, caption: str) -> None:
        self.report.figure(fig, caption)
        with activity(f"saving figure {name}"):  # the first PNG starts a headless browser
            saved = save_figure(fig, self.folder / name, png=self.png)
        if saved.png is not None:
            self.pngs.append(saved.png)
        elif self.png and saved.png_error:
            self.png_errors.add(saved.png_error)


def run_demo(config: DemoConfig) -> DemoResult:
    """`headsup demo` as a library call: train (or load, `config.masks`) a mask per task, evaluate them,
    run removal sweeps in weight, influence and random order, layer similarity and the logit lens, and
    write tables, figures and a self-contained `report.html` into `config.out` as one set.

    Returns a `DemoResult`. Tasks and stored masks are checked before the model is loaded.
    """
    start = time.perf_counter()
    threads = config.threads if config.threads is not None else (1 if config.model == "organism" else None)
    if threads is not None:
        torch.set_num_threads(threads)
    out = Path(config.out)
    stage = OutputSet(out, "demo")  # report, figures and tables are moved in together at the end
    # Tasks and stored masks are checked before the model loads: a missing file fails at once.
    tasks: list[Task] = [load_task(name, data_dir=config.data_dir) for name in config.tasks]
    mask_files = None if config.masks is None else stored_mask_files(config.masks, [t.name for t in tasks])
    model = load_model(config.model, **model_arguments(config))
    planted = planted_pathways(config.model, model)
    n_total = model.cfg.n_layers * model.cfg.n_heads
    report = Report(f"headsup_lens demo — {config.model}")
    report.intro(
        f"A language model's attention heads ({model.cfg.n_layers} layers x {model.cfg.n_heads} heads = {n_total} "
        "here) can be switched off one by one. This report learns, for each task, a head mask: a choice of "
        "heads to keep such that the model performs the task when it sees only the bare input, with no "
        "instruction. It then checks the masks against baselines and looks inside the model while heads are "
        f"removed. Tasks: {', '.join(t.name for t in tasks)}."
    )
    if planted is not None:
        report.note(
            "The built-in organism is a small Llama trained here with planted pathways: removing a "
            "task's head set S_t makes it perform that task without instruction. It validates the "
            "tooling; the paper's claim about natural LLMs is tested on real LLMs."
        )
    page = _Page(report, stage.path / "figures", config.png)
    print(
        f"loaded {config.model} ({model.cfg.n_layers} layers x {model.cfg.n_heads} heads) on {model.cfg.device}",
        flush=True,
    )
    masks = _learned_masks(page, config, model, tasks, mask_files, planted)
    summary, evaluation, outputs = _evaluation(page, model, tasks, masks, planted)
    _all_settings(page.report, evaluation, tasks)
    task, mask = tasks[0], masks[tasks[0].name]
    sweeps, sweep_rows = _sweeps(page, config, model, task, mask)
    _inside(page, model, task, mask)

    # 5. Files.
    print(f"writing the report, tables and figures to {out} ...", flush=True)
    tables_dir = stage.path / "tables"
    for name, frame in {
        "summary": summary,
        "evaluation": evaluation,
        "sweeps": pd.DataFrame(sweep_rows),
        "generations": pd.concat(outputs, ignore_index=True),
    }.items():
        atomic_write(tables_dir / f"{name}.csv", lambda tmp, frame=frame: frame.to_csv(tmp, index=False))
    for name, sweep in sweeps.items():
        atomic_write(
            tables_dir / f"sweep_{name.replace(' ', '_')}.csv",
            lambda tmp, sweep=sweep: sweep.long().to_csv(tmp, index=False),
        )
    seconds = time.perf_counter() - start
    report.note(f"Computed in {seconds:.0f} s with torch {torch.__version__} on {model.cfg.device}.")
    report.write(stage.path / "report.html")
    for error in sorted(page.png_errors):
        print(f"PNG figures not written (HTML written): {error}")
    atomic_write_json(
        stage.path / "summary.json",
        {
            "seconds": seconds,
            "summary": summary.to_dict("records"),
            "sweeps": sweep_rows,
            "png_figures": [Path(p).name for p in page.pngs],
        },
    )
    stage.commit()
    return DemoResult(out=out, summary=summary, evaluations=evaluation, sweeps=sweeps, seconds=seconds)


def _learned_masks(
    page: _Page,
    config: DemoConfig,
    model,
    tasks: list[Task],
    mask_files: dict[str, Path] | None,
    planted: dict[str, list[tuple[int, int]]] | None,
) -> dict[str, HeadMask]:
    """1. Masks, trained for all tasks at once (per-row masks) without instructions, or loaded; their
    heat map, with the planted heads marked on the organism."""
    report, figure = page.report, page.figure
    n_total = model.cfg.n_layers * model.cfg.n_heads
    out = Path(config.out)
    train_config = TrainConfig.fast(steps=config.steps, batch_size=config.batch_size, seed=config.seed)
    if mask_files is not None:  # stored masks (e.g. trained once on a slow machine): no training here
        masks = {name: HeadMask.load(path, model) for name, path in mask_files.items()}
        schedule = f"Masks loaded from {config.masks} (trained earlier), not trained in this run."
    else:
        done = resume_step(out / "training", model, tasks, train_config)
        if done is None:
            print(f"training masks for {len(tasks)} task(s), {config.steps} steps ...")
        else:  # a rerun goes on where the earlier one stopped, and says so (as `headsup train` does)
            went = "all done, read from" if done >= config.steps else "resuming from"
            print(
                f"training masks for {len(tasks)} task(s), {config.steps} steps: {went} the checkpoint of step "
                f"{done} in {out / 'training'} ..."
            )
        results = train_masks(model, tasks, train_config, out_dir=out / "training")
        masks = {name: result.mask for name, result in results.items()}
        schedule = (
            f"Schedule: the fast one (TrainConfig.fast, not the paper's): {train_config.steps} steps, batch "
            f"{train_config.batch_size} per task, AdamW lr {train_config.lr:g} -> {train_config.min_lr:g}, mask "
            f"logits initialised at N({train_config.init_mean:g}, {train_config.init_std:g}) (every head kept at the "
            "start). The paper trains 6 250 steps at lr 0.01 from N(4, 0.02)."
        )
    report.heading("Learned masks")
    report.note(schedule)
    kept = ", ".join(f"{name}: {m.n_kept}/{n_total}" for name, m in masks.items())
    planted_note = (
        " Red crosses: the task's planted heads S_t, the ones a perfect mask removes; a mask that "
        "found the pathway is white under every cross and dark elsewhere."
        if planted is not None
        else ""
    )
    figure(
        mask_heatmap(
            masks,
            title="Learned masks (1 = kept)",
            planted={name: heads for name, heads in (planted or {}).items() if name in masks} or None,
        ),
        "masks",
        f"One panel per task: rows are layers (0 at the bottom), columns are heads; dark = kept, white = removed. "
        f"Heads kept: {kept}. A mask that keeps every head has learned nothing; one that removes most heads "
        f"usually breaks the model.{planted_note}",
    )
    return masks


def _evaluation(
    page: _Page,
    model,
    tasks: list[Task],
    masks: dict[str, HeadMask],
    planted: dict[str, list[tuple[int, int]]] | None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[pd.DataFrame]]:
    """2. Evaluation in the paper's settings, plus recovery of the planted pathway: (the per-task summary,
    every setting's row, every output)."""
    report = page.report
    n_total = model.cfg.n_layers * model.cfg.n_heads
    evaluations, summary_rows, display_rows, outputs = [], [], [], []
    for number, task in enumerate(tasks, 1):
        print(f"evaluating {task.name} ({number}/{len(tasks)}) in the paper's settings ...", flush=True)
        result = evaluate(model, task, masks[task.name], EvalConfig(alpha=0.25))  # a progress bar per setting
        table = result.table
        evaluations.append(table)
        outputs.append(result.generations)
        accuracy = dict(zip(table.setting, table.accuracy))
        n = int(table.n_examples.iloc[0]) if "n_examples" in table else len(task.eval_pairs)
        row = {
            "task": task.name,
            "heads kept": masks[task.name].n_kept,
            "original": accuracy.get("original"),
            "masked": accuracy.get("masked"),
            "random mask": accuracy.get("random mask"),
            "instructed": accuracy.get("instructed"),
        }
        shown = {
            "task": task.name,
            "heads kept": f"{masks[task.name].n_kept}/{n_total}",
            "no instruction": _percent(row["original"], n),
            "no instruction + mask": _percent(row["masked"], n),
            "random mask (same size)": _percent(row["random mask"], n),
            "with instruction": _percent(row["instructed"], n),
        }
        if planted is not None and task.name in planted:
            recovery = pathway_recovery(masks[task.name], planted[task.name])
            row["jaccard vs S_t"] = recovery["jaccard_vs_planted"]
            row["random expectation"] = recovery["jaccard_random_expectation"]
            shown["overlap with planted S_t (Jaccard, removed heads)"] = f"{row['jaccard vs S_t']:.2f}"
            shown["same for a random mask"] = f"{row['random expectation']:.2f}"
        summary_rows.append(row)
        display_rows.append(shown)
    evaluation = pd.concat(evaluations, ignore_index=True)
    summary = pd.DataFrame(summary_rows)
    n_eval = int(evaluation.n_examples.max()) if "n_examples" in evaluation else len(tasks[0].eval_pairs)
    report.heading("Does the mask make the model do the task without instruction?")
    caption = (
        f"Accuracy on {n_eval} held-out inputs per task (greedy decoding; an answer counts when the output "
        "contains it, or starts with it for letter tasks). Good: 'no instruction + mask' close to 'with "
        "instruction' and far above 'no instruction' and 'random mask', which removes as many heads at random."
    )
    if planted is not None:
        caption += (
            " Overlap with S_t: Jaccard similarity (shared heads / heads in either) between the removed "
            "heads and the planted set; 1 = exactly the planted pathway, the random value is what chance gives."
        )
    report.table(pd.DataFrame(display_rows), caption=caption)
    return summary, evaluation, outputs


def _all_settings(report: Report, evaluation: pd.DataFrame, tasks: list[Task]) -> None:
    """Every task in every setting, with intervals, controls and p-values."""
    n_eval = int(evaluation.n_examples.max()) if "n_examples" in evaluation else len(tasks[0].eval_pairs)
    report.heading("All settings")
    multi_word = {t.name for t in tasks if _multi_word(t)}
    columns = [
        "task",
        "setting",
        "n_kept",
        "n_examples",
        "answer_nll",
        "perplexity",
        "accuracy",
        "strict",
        "echo",
        "empty",
        "p_vs_original",
        "p_vs_instructed",
        "balanced_accuracy",
    ]
    if multi_word:
        columns += ["rouge_l", "bleu"]
    shown = evaluation[[c for c in columns if c in evaluation]].copy()
    for column in ("accuracy", "strict"):  # with the 95% Wilson interval
        if column in shown:
            shown[column] = [
                # a cell breaks between the value and its interval only (U+2011: a hyphen that never breaks)
                f"{_percent(v, int(k))} [{100 * lo:.0f}\u2011{100 * hi:.0f}%]" if pd.notna(v) else "—"
                for v, k, lo, hi in zip(
                    shown[column],
                    shown.get("n_examples", n_eval),
                    evaluation[f"{column}_low"],
                    evaluation[f"{column}_high"],
                )
            ]
    for column in ("rouge_l", "bleu"):
        if column in shown:
            shown.loc[~shown.task.isin(multi_word), column] = float("nan")
    # So that the table fits the page: a task's name breaks after its "/" (U+200B, no width), and a
    # task's rows after its first leave it blank.
    shown["task"] = [
        name.replace("/", "/\u200b") if first else "" for name, first in zip(shown.task, ~shown.task.duplicated())
    ]
    for column in ("p_vs_original", "p_vs_instructed"):
        if column in shown:
            shown[column] = [format_p_value(float(p)) for p in shown[column]]
    shown = shown.rename(
        columns={
            "n_kept": "heads kept",
            "n_examples": "examples",
            "answer_nll": "answer loss (nats/token)",
            "accuracy": "accuracy (paper's matcher)",
            "strict": "strict accuracy",
            "echo": "outputs repeating the input",
            "empty": "empty outputs",
            "p_vs_original": "p vs original (McNemar)",
            "p_vs_instructed": "p vs instructed (McNemar)",
        }
    )
    settings_caption = (
        "Each task in the paper's settings: original (bare input), instructed (instruction + input), masked "
        "(bare input, learned mask), random mask (the mask shuffled: same number of heads), instructed + scaled "
        "mask (heads outside the mask scaled by 0.25 instead of removed). Answer loss: cross-entropy of the "
        "reference answer's tokens in nats, each example's mean averaged over examples (lower is better; the "
        "paper calls it 'PPL'); perplexity: exp of the cross-entropy over all answer tokens, 1 is perfect. "
        "Accuracy counts an output that contains (or starts with) the answer; strict accuracy only one whose first "
        "line is the answer (whole words); [..] is the 95% Wilson interval. Controls: 'echo baseline' outputs the "
        "input itself (what copying scores), 'majority label' always the most frequent label (label tasks). p: exact "
        "McNemar test of the same examples against the original / instructed rows. Every output is in "
        "tables/generations.csv."
    )
    if multi_word:
        settings_caption += " ROUGE-L and BLEU (0-1 and 0-100, higher is better) are shown for phrase answers only."
    else:
        settings_caption += " ROUGE-L and BLEU are left out: with one-word answers they add nothing to accuracy."
    report.table(shown, caption=settings_caption)  # cells wrap between a value and its interval: it fits the page


def _sweeps(
    page: _Page, config: DemoConfig, model, task: Task, mask: HeadMask
) -> tuple[dict[str, RemovalSweep], list[dict]]:
    """3. Removal sweeps on one held-out example of the first task, in weight, influence and random order."""
    report, figure = page.report, page.figure
    n_total = model.cfg.n_layers * model.cfg.n_heads
    word, answer = task.eval_pairs[0]
    target = answer  # the sweep tracks the first token of the answer
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    print(f"removal sweeps on {task.name!r} for input {word!r} ...")
    sweeps = {
        "weight order": removal_sweep(
            model, word, weight_order(mask), target_tokens=[target], max_new_tokens=12, record_layers=True
        )
    }
    k = min(config.influence_k, len(sweeps["weight order"].order))
    print("  influence order ...", flush=True)
    sweeps["influence order"] = removal_sweep(
        model, word, influence_order(sweeps["weight order"], k=k), target_tokens=[target], max_new_tokens=12
    )
    print("  random order ...", flush=True)
    sweeps["random order"] = removal_sweep(
        model, word, random_order(shape, seed=config.seed), target_tokens=[target], max_new_tokens=12
    )
    sweep_rows = [
        {
            "order": name,
            "switch step (target top-1)": sweep.switch_step,
            "first change of continuation": sweep.change_step,
            "steps": len(sweep.steps),
        }
        for name, sweep in sweeps.items()
    ]
    report.heading(f"Removing heads one by one: {task.name}, input {word!r}, expected answer {answer!r}")
    report.table(
        pd.DataFrame(
            [
                {
                    "removal order": r["order"],
                    "heads removed when the answer becomes the top next token": step_or_never(
                        r["switch step (target top-1)"]
                    ),
                    "heads removed when the continuation first changes": step_or_never(
                        r["first change of continuation"]
                    ),
                }
                for r in sweep_rows
            ]
        ),
        caption=(
            f"Starting from the full model, heads are removed one at a time ({n_total} in all) and the model is "
            "run on the bare input after each removal. Weight order: least important heads first, by the learned "
            f"mask weights. Influence order: the first {k} heads of that order re-sorted by how much each removal "
            "helped the answer. Random order: a baseline. A mask that found the task's pathway makes the answer "
            "the top token after few removals in weight order and late or never in random order."
        ),
    )
    for name, sweep in sweeps.items():
        slug = name.replace(" ", "_")
        figure(
            rank_figure(sweep, title=f"Token ranks, {name}"),
            f"sweep_ranks_{slug}",
            f"Rank of each tracked token among all next tokens after each removal ({name}); 1 = the model's "
            "prediction, log scale. Thick line: the expected answer's first token; dotted: the full model's "
            "top tokens. Vertical lines (named in the legend): dashed green when the answer becomes the prediction, "
            "dash-dotted grey when the greedy continuation first differs from the full model's.",
        )
    figure(
        generation_table(sweeps["weight order"], title="Continuations where they change (weight order)"),
        "sweep_generations",
        "The model's greedy output after the given number of heads was removed in weight order, shown at each "
        "step where it changes: from echoing or following the default behaviour to doing the task, and, when "
        "too many heads are gone, to broken text.",
    )
    return sweeps, sweep_rows


def _inside(page: _Page, model, task: Task, mask: HeadMask) -> None:
    """4. Similarity to the instructed run (Fig. 4) and the logit lens under the mask."""
    report, figure = page.report, page.figure
    word = task.eval_pairs[0][0]
    print("similarity to the instructed run and logit lens ...", flush=True)
    instructed = task.user_text(word, instructed=True) if task.instruction else None
    if instructed is not None:
        tables = {
            "original vs instructed": layer_similarity(model, Setting(word), Setting(instructed)),
            "masked vs instructed": layer_similarity(model, Setting(word, mask=mask.values), Setting(instructed)),
            "masked vs masked + instructed": layer_similarity(
                model, Setting(word, mask=mask.values), Setting(instructed, mask=mask.values)
            ),
        }
        report.heading("Does the masked model think like the instructed one?")
        figure(
            similarity_figure(tables, title="Cosine similarity per layer"),
            "similarity",
            "Cosine similarity (-1 to 1; 1 = same direction) of the hidden state at the last input position, "
            "per layer, between two runs. If the mask stands in for the instruction, 'masked vs instructed' "
            "rises above 'original vs instructed', most clearly in the later layers.",
        )
    lens = logit_lens(model, word, k=5, mask=mask.values)
    report.heading("What each layer predicts under the mask (logit lens)")
    figure(
        logit_lens_figure(lens, title=f"Logit lens, {task.name}, masked"),
        "logit_lens",
        "Each row is a layer's residual stream read out as next-token probabilities (final norm applied): the "
        "top 5 tokens, coloured by probability (0-1). Watch the layer where the answer appears.",
    )
