"""Head-finding methods side by side: per task, every method's ranking, its cost, its elicitation curve
(accuracy and answer loss without instruction as its heads are removed) and, on the organism, its
ROC/AUROC against the planted heads. Resumable: each ranking is saved as it finishes
(`methods/<task>/<method>.json`) and each task's curves once done; a rerun skips what exists.

Learned masks: trained here for all tasks at once (`--schedule`, the organism's fast one by default;
cost = training time / number of tasks), or read from `--masks-dir/<task>.safetensors` (cost =
the time of `--cost-steps` training steps of the mask's recipe, scaled to its step count).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import torch
from _common import parser, setup

import headsup_lens as hl
from headsup_lens.analysis import DEFAULT_METHODS, HeadScores, compare_methods, head_scores
from headsup_lens.masks import HeadMask
from headsup_lens.plots import auroc_table_figure, elicitation_figure, roc_figure
from headsup_lens.training import safe_name


def learned_rankings(xp, tasks, args) -> dict[str, HeadScores]:
    """The paper's learned mask per task as a ranking, with its (measured) training cost."""
    out = {}
    if args.masks_dir:
        for task in tasks:
            mask = HeadMask.load(Path(args.masks_dir) / f"{safe_name(task.name)}.safetensors", xp.model)
            steps = int(mask.metadata.get("steps", hl.TrainConfig().steps))
            probe = hl.TrainConfig.fast(
                steps=args.cost_steps,
                init_mean=float(mask.metadata.get("init_mean", 2.0)),
                progress=False,
                checkpoint_every=0,
            )
            start, cpu_start = time.perf_counter(), time.process_time()
            hl.train_mask(xp.model, task, probe)
            ranking = head_scores(xp.model, task, "learned_mask", mask=mask, n_examples=1)
            ranking.seconds = (time.perf_counter() - start) * steps / args.cost_steps
            ranking.cpu_seconds = (time.process_time() - cpu_start) * steps / args.cost_steps
            ranking.settings.update(cost="extrapolated", cost_steps=args.cost_steps, trained_steps=steps)
            out[task.name] = ranking
        return out
    config = xp.train_config().replace(progress=False, checkpoint_every=0)
    start, cpu_start = time.perf_counter(), time.process_time()
    results = hl.train_masks(xp.model, tasks, config)
    seconds, cpu_seconds = (time.perf_counter() - start) / len(tasks), (time.process_time() - cpu_start) / len(tasks)
    for task in tasks:
        ranking = head_scores(xp.model, task, "learned_mask", mask=results[task.name].mask, n_examples=1)
        ranking.seconds, ranking.cpu_seconds = seconds, cpu_seconds
        ranking.settings.update(
            source="trained",
            cost="training time / tasks trained together",
            tasks_together=len(tasks),
            **config.recipe(),
        )
        out[task.name] = ranking
    return out


def rankings_only(xp, tasks, folder, options, args) -> None:
    """Rank with every method but the learned mask (whose rankings a full run saves), then tabulate
    AUROC and precision at |S_t| of every ranking found against the planted heads."""
    from headsup_lens.analysis import auroc, planted_heads, precision_at

    records = []
    for task in tasks:
        for method in args.methods:
            path = folder / safe_name(task.name) / f"{method}.json"
            if not path.is_file() and method != "learned_mask":
                ranking = head_scores(
                    xp.model,
                    task,
                    method,
                    n_examples=args.n_examples,
                    seed=args.seed,
                    max_rows=args.max_rows,
                    **options.get(method, {}),
                )
                ranking.save(path)
                print(f"[methods] {task.name} {method}: {ranking.seconds:.1f} s")
            if not path.is_file():
                continue
            ranking = HeadScores.load(path)
            planted = planted_heads(task, xp.model)
            records.append(
                {
                    "task": task.name,
                    "method": method,
                    "seconds": ranking.seconds,
                    "cpu_seconds": ranking.cpu_seconds,
                    "auroc": auroc(ranking, planted) if planted else float("nan"),
                    "precision_at_planted": precision_at(ranking, planted) if planted else float("nan"),
                }
            )
    table = pd.DataFrame.from_records(records)
    xp.table(table, "methods_rankings")
    aurocs = table.pivot(index="method", columns="task", values="auroc")
    aurocs.columns = [c.removeprefix("organism/") for c in aurocs.columns]
    aurocs["mean"] = aurocs.mean(axis=1)
    aurocs = aurocs.sort_values("mean", ascending=False)
    xp.table(aurocs.reset_index(), "methods_auroc")
    xp.figure(auroc_table_figure(aurocs), "methods_auroc")
    xp.done(aurocs.to_string(float_format=lambda v: f"{v:.2f}"))


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, multi_task=True)
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), help="methods to compare (default: all)")
    p.add_argument("--k-max", type=int, default=24, help="largest number of heads removed on the curves (default: 24)")
    p.add_argument("--k-step", type=int, default=2, help="k step of the curves (default: 2)")
    p.add_argument("--n-eval", type=int, default=24, help="evaluation examples per curve point (default: 24)")
    p.add_argument("--n-examples", type=int, default=16, help="training examples the methods score on (default: 16)")
    p.add_argument("--soft-steps", type=int, default=60, help="optimisation steps of the soft gates (default: 60)")
    p.add_argument("--soft-lr", type=float, default=0.1, help="learning rate of the soft gates (default: 0.1)")
    p.add_argument(
        "--masks-dir", default=None, help="folder of stored learned masks <task>.safetensors (default: train)"
    )
    p.add_argument("--cost-steps", type=int, default=10, help="training steps timed to estimate a stored mask's cost")
    p.add_argument("--max-rows", type=int, default=256, help="rows per batched pass (default: 256)")
    p.add_argument(
        "--rankings-only",
        action="store_true",
        help="only rank heads (saved per method) and write the AUROC table from the rankings found; no curves",
    )
    args = p.parse_args(argv)
    xp = setup("methods", args)
    tasks = xp.tasks()
    folder = xp.out / "methods"
    options = {
        m: {"steps": args.soft_steps, "lr": args.soft_lr} for m in ("soft_gate_necessary", "soft_gate_sufficient")
    }
    pending = [t for t in tasks if not (folder / safe_name(t.name) / "summary.csv").is_file()]
    if args.rankings_only:
        return rankings_only(xp, tasks, folder, options, args)
    learned = {}
    if "learned_mask" in args.methods and any(
        not (folder / safe_name(t.name) / "learned_mask.json").is_file() for t in pending
    ):
        learned = learned_rankings(
            xp, [t for t in pending if not (folder / safe_name(t.name) / "learned_mask.json").is_file()], args
        )
        for name, ranking in learned.items():  # saved at once: a stopped run keeps the trained masks' rankings
            ranking.save(folder / safe_name(name) / "learned_mask.json")
    summaries = []
    for task in tasks:
        here = folder / safe_name(task.name)
        if (here / "summary.csv").is_file():
            summaries.append(pd.read_csv(here / "summary.csv"))
            continue
        rankings = []
        for method in args.methods:
            path = here / f"{method}.json"
            if path.is_file():
                rankings.append(HeadScores.load(path))
                continue
            if method == "learned_mask":
                ranking = learned[task.name]
            else:
                ranking = head_scores(
                    xp.model,
                    task,
                    method,
                    n_examples=args.n_examples,
                    seed=args.seed,
                    max_rows=args.max_rows,
                    **options.get(method, {}),
                )
            ranking.save(path)
            print(f"[methods] {task.name} {method}: {ranking.seconds:.1f} s")
            rankings.append(ranking)
        comparison = compare_methods(
            xp.model, task, rankings, k_max=args.k_max, k_step=args.k_step, n_eval=args.n_eval, max_rows=args.max_rows
        )
        stem = f"methods_{safe_name(task.name.removeprefix('organism/'))}"
        xp.table(comparison.curves, f"methods/{safe_name(task.name)}/curves")
        xp.figure(elicitation_figure(comparison), stem + "_curves")
        if comparison.planted:
            xp.figure(roc_figure(comparison), stem + "_roc")
        summary = comparison.summary.assign(task=task.name, curve_seconds=comparison.settings["curve_seconds"])
        xp.table(summary, f"methods/{safe_name(task.name)}/summary")  # written last: marks the task done
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        summaries.append(summary)
    table = pd.concat(summaries, ignore_index=True)
    xp.table(table, "methods_summary")
    if "auroc" in table:
        aurocs = table.pivot(index="method", columns="task", values="auroc")
        aurocs.columns = [c.removeprefix("organism/") for c in aurocs.columns]
        aurocs["mean"] = aurocs.mean(axis=1)
        aurocs = aurocs.sort_values("mean", ascending=False)
        xp.table(aurocs.reset_index(), "methods_auroc")
        xp.figure(auroc_table_figure(aurocs), "methods_auroc")
        print(aurocs.to_string(float_format=lambda v: f"{v:.2f}"))
    settings = {k: getattr(args, k) for k in ("k_max", "k_step", "n_eval", "n_examples", "soft_steps", "soft_lr")}
    xp.done(f"settings: {settings}, threads: {torch.get_num_threads()}")
    return None


if __name__ == "__main__":
    main()
