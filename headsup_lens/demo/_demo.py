"""The main job: train masks without instructions, evaluate them, and run every analysis on them.

On the built-in organism it also compares each learned mask with the task's planted pathway S_t.
Everything lands in one output folder: a self-contained `report.html`, figures (HTML + PNG when a
renderer exists), tables (CSV) and the masks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from .._io import atomic_write, atomic_write_json
from ..analysis import (
    RemovalSweep,
    Setting,
    influence_order,
    pathway_recovery,
    layer_similarity,
    logit_lens,
    random_order,
    removal_sweep,
    weight_order,
)
from ..data import Task, load_task
from ..evaluation import evaluate
from ..models import load_model
from ..plots import (
    generation_table,
    logit_lens_figure,
    mask_heatmap,
    rank_figure,
    save_figure,
    similarity_figure,
)
from ..training import TrainConfig, train_masks
from ._report import Report

DEFAULT_TASKS = ("organism/reverse", "organism/antonym", "organism/translate")


@dataclass
class DemoConfig:
    """Options of `headsup demo`."""

    model: str = "organism"
    """Model name, local Hugging Face directory, or "organism" (built in, no download)."""
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    """Tasks to train masks for (any names `load_task` knows)."""
    out: str = "headsup_demo"
    """Output folder for the report, figures, tables and masks."""
    steps: int = 300
    """Mask-training steps (the fast schedule of `TrainConfig.fast`; the paper uses 6 250)."""
    batch_size: int = 16
    """Training examples per task per step."""
    seed: int = 0
    """Seed of mask training, the random baselines and the random removal order."""
    influence_k: int = 64
    """Influence order: re-order the first K heads of the weight-order sweep by their effect."""
    data_dir: str | None = None
    """Data directory for the paper's tasks (not needed for organism tasks)."""
    device: str | None = None
    """Device (default: CUDA when available, else CPU)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""
    png: bool = True
    """Also write PNG figures when a renderer is available."""
    threads: int | None = None
    """torch CPU threads (default: 1 for the organism, whose ops are too small to share; torch's own otherwise)."""


@dataclass
class DemoResult:
    out: Path
    summary: pd.DataFrame
    evaluations: pd.DataFrame
    sweeps: dict[str, RemovalSweep]
    seconds: float


def planted_pathways(model_name: str, model) -> dict[str, list[tuple[int, int]]] | None:
    """S_t per task when the model is the built-in organism, else None."""
    if model_name != "organism":
        return None
    from ..organism import load_planted

    return {f"organism/{name}": heads for name, heads in load_planted().items()}


def run_demo(config: DemoConfig) -> DemoResult:
    start = time.perf_counter()
    threads = config.threads if config.threads is not None else (1 if config.model == "organism" else None)
    if threads is not None:
        torch.set_num_threads(threads)
    out = Path(config.out)
    figures = out / "figures"
    model = load_model(config.model, device=config.device, dtype=config.dtype)
    tasks: list[Task] = [load_task(name, data_dir=config.data_dir) for name in config.tasks]
    planted = planted_pathways(config.model, model)
    report = Report(f"headsup_lens demo — {config.model}")
    if planted is not None:
        report.note(
            "The built-in organism is a small Llama trained here with planted pathways: removing a "
            "task's head set S_t makes it perform that task without instruction. It validates the "
            "tooling; the paper's claim about natural LLMs is tested on real LLMs."
        )
    saved_pngs: list[Path] = []

    def figure(fig, name: str) -> None:
        report.figure(fig)
        saved = save_figure(fig, figures / name, png=config.png, include_plotlyjs="cdn")
        if saved.png is not None:
            saved_pngs.append(saved.png)

    # 1. Masks, trained for all tasks at once (per-row masks), without instructions.
    train_config = TrainConfig.fast(steps=config.steps, batch_size=config.batch_size, seed=config.seed)
    print(f"training masks for {len(tasks)} task(s), {config.steps} steps ...")
    results = train_masks(model, tasks, train_config, out_dir=out / "training")
    masks = {name: result.mask for name, result in results.items()}
    report.heading("Learned masks")
    report.note(f"Mask training: {train_config.steps} steps, batch {train_config.batch_size} per task, "
                f"lr {train_config.lr}, init N({train_config.init_mean}, {train_config.init_std}).")
    figure(mask_heatmap(masks, title="Learned masks (1 = kept)"), "masks")

    # 2. Evaluation in the paper's settings, plus recovery of the planted pathway.
    evaluations, summary_rows = [], []
    for task in tasks:
        table = evaluate(model, task, masks[task.name], alpha=0.25)
        evaluations.append(table)
        accuracy = dict(zip(table.setting, table.accuracy))
        row = {
            "task": task.name,
            "heads kept": masks[task.name].n_kept,
            "original": accuracy.get("original"),
            "masked": accuracy.get("masked"),
            "random mask": accuracy.get("random mask"),
            "instructed": accuracy.get("instructed"),
        }
        if planted is not None and task.name in planted:
            recovery = pathway_recovery(masks[task.name], planted[task.name])
            row["jaccard vs S_t"] = recovery["jaccard_vs_planted"]
            row["random expectation"] = recovery["jaccard_random_expectation"]
        summary_rows.append(row)
    evaluation = pd.concat(evaluations, ignore_index=True)
    summary = pd.DataFrame(summary_rows)
    report.heading("Accuracy without instruction (greedy, held-out examples)")
    report.table(summary)
    report.heading("All settings")
    report.note("answer_nll is the mean token cross-entropy of the answer in nats (the paper's 'PPL'); "
                "perplexity is exp(answer_nll).")
    report.table(evaluation)

    # 3. Removal sweeps on one held-out example of the first task.
    task = tasks[0]
    mask = masks[task.name]
    word, answer = task.eval_pairs[0]
    target = answer  # the sweep tracks the first token of the answer
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    print(f"removal sweeps on {task.name!r} for input {word!r} ...")
    sweeps = {"weight order": removal_sweep(model, word, weight_order(mask), target_tokens=[target],
                                            max_new_tokens=12, record_layers=True)}
    k = min(config.influence_k, len(sweeps["weight order"].order))
    sweeps["influence order"] = removal_sweep(model, word, influence_order(sweeps["weight order"], k=k),
                                              target_tokens=[target], max_new_tokens=12)
    sweeps["random order"] = removal_sweep(model, word, random_order(shape, seed=config.seed),
                                           target_tokens=[target], max_new_tokens=12)
    sweep_rows = [
        {"order": name, "switch step (target top-1)": sweep.switch_step,
         "first change of continuation": sweep.change_step, "steps": len(sweep.steps)}
        for name, sweep in sweeps.items()
    ]
    report.heading(f"One-by-one removal: {task.name}, input {word!r}, target {answer!r}")
    report.table(pd.DataFrame(sweep_rows))
    for name, sweep in sweeps.items():
        slug = name.replace(" ", "_")
        figure(rank_figure(sweep, title=f"Token ranks, {name}"), f"sweep_ranks_{slug}")
    figure(generation_table(sweeps["weight order"], title="Continuations where they change (weight order)"),
           "sweep_generations")

    # 4. Similarity to the instructed run (Fig. 4) and the logit lens under the mask.
    instructed = task.user_text(word, instructed=True) if task.instruction else None
    if instructed is not None:
        tables = {
            "original vs instructed": layer_similarity(model, Setting(word), Setting(instructed)),
            "masked vs instructed": layer_similarity(model, Setting(word, mask=mask.values), Setting(instructed)),
            "masked vs masked + instructed": layer_similarity(
                model, Setting(word, mask=mask.values), Setting(instructed, mask=mask.values)),
        }
        report.heading("Similarity to the instructed run (last input position)")
        figure(similarity_figure(tables, title="Cosine similarity per layer"), "similarity")
    lens = logit_lens(model, word, k=5, mask=mask.values)
    report.heading("Logit lens under the learned mask (final norm applied)")
    figure(logit_lens_figure(lens, title=f"Logit lens, {task.name}, masked"), "logit_lens")

    # 5. Files.
    tables_dir = out / "tables"
    for name, frame in {"summary": summary, "evaluation": evaluation,
                        "sweeps": pd.DataFrame(sweep_rows)}.items():
        atomic_write(tables_dir / f"{name}.csv", lambda tmp, frame=frame: frame.to_csv(tmp, index=False))
    for name, sweep in sweeps.items():
        atomic_write(tables_dir / f"sweep_{name.replace(' ', '_')}.csv",
                     lambda tmp, sweep=sweep: sweep.long().to_csv(tmp, index=False))
    seconds = time.perf_counter() - start
    report.note(f"Computed in {seconds:.0f} s with torch {torch.__version__} on {model.cfg.device}.")
    report.write(out / "report.html")
    atomic_write_json(out / "summary.json", {"seconds": seconds, "summary": summary.to_dict("records"),
                                             "sweeps": sweep_rows, "png_figures": [str(p) for p in saved_pngs]})
    return DemoResult(out=out, summary=summary, evaluations=evaluation, sweeps=sweeps, seconds=seconds)
