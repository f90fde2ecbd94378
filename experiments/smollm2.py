"""The paper's experiments on a real instruction-tuned LLM, SmolLM2-135M-Instruct (30 layers x 9 heads).

Three stages, each calling only the library and writing to `figures/smollm2/` (`--out`):

    python experiments/smollm2.py select    # greedy accuracy of the 35 function-vector tasks, with and without instruction
    python experiments/smollm2.py train  --tasks antonym sentiment --seed 0   # masks -> figures/smollm2/masks/
    python experiments/smollm2.py analyze --tasks antonym sentiment           # everything else, from the stored masks
    python experiments/smollm2.py evaluate --tasks antonym                    # only the settings tables (Tables 1/2)

`select` writes `task_selection.csv` / `.md` (resumable: tasks already in the CSV are skipped).
`train` runs `train_masks` (`TrainConfig.fast`, one pass for all tasks, per-row masks) with its run
folder (checkpoints) under `--runs` (git-ignored) and keeps only the final masks in
`<out>/masks/<task>.safetensors` (seed 0) or `<task>_seed<k>.safetensors`. `analyze` regenerates
every table and figure from the stored masks without retraining: the settings table (Tables 1/2),
removal sweeps by weight and random order (Fig. 2), similarity to the instructed run (Fig. 4),
logit lens (Table 41), Jaccard between masks (Table 5) and the alpha grid (Fig. 6). `evaluate` redoes
only the settings tables, with every generation behind them (`tables12_generations_<task>.csv`), and
the combined tables. Each stage appends its wall time to `<out>/times.csv`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
import torch
from _common import fast_config, figure_root
from _common import record_time as _record_time

import headsup_lens as hl
from headsup_lens._io import atomic_write
from headsup_lens.analysis import Setting, alpha_grid, jaccard_matrix, jaccard_table, random_order, weight_order
from headsup_lens.data import FV_TASKS
from headsup_lens.evaluation import EvalConfig, accuracy, rescore
from headsup_lens.plots import (
    alpha_figure,
    jaccard_figure,
    logit_lens_figure,
    mask_heatmap,
    rank_figure,
    save_figure,
    similarity_figure,
)

ROOT = Path(__file__).resolve().parents[1]
TEXT_COLUMNS = {"input": str, "answer": str, "output": str}  # stored generations: text stays text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=("select", "train", "analyze", "evaluate", "rescore", "combine"))
    p.add_argument("--model", default="smollm2", help="model name or local directory (default: smollm2)")
    p.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help="tasks (select: default all 35 function-vector tasks; train: required; analyze: default every "
        "stored seed-0 mask)",
    )
    p.add_argument("--data-dir", default=None, help="data directory (default: $HEADSUP_DATA_DIR)")
    p.add_argument("--out", default=str(ROOT / "figures" / "smollm2"), help="output folder (default: figures/smollm2)")
    p.add_argument(
        "--runs",
        default=str(ROOT / "runs" / "smollm2"),
        help="training run folders with checkpoints (default: runs/smollm2, git-ignored)",
    )
    p.add_argument("--seed", type=int, default=0, help="train: TrainConfig.fast(seed=...) (default: 0)")
    p.add_argument("--steps", type=int, default=None, help="train: override the 300 steps of TrainConfig.fast")
    p.add_argument("--batch-size", type=int, default=None, help="train: override the batch of 16 per task")
    p.add_argument(
        "--eval-batch-size", type=int, default=64, help="examples per forward pass / generation (default: 64)"
    )
    p.add_argument("--alpha", type=float, default=0.25, help="analyze: alpha of the instructed + scaled mask row")
    p.add_argument(
        "--new-tokens", type=int, default=12, help="analyze: greedy tokens per removal-sweep step (default: 12)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: on a shared 2-core machine 2 threads measured slower)",
    )
    p.add_argument("--no-png", action="store_true", help="write HTML figures only")
    return p


def _mask_path(out: Path, task: str, seed: int) -> Path:
    name = hl.training.safe_name(task)
    return out / "masks" / (f"{name}.safetensors" if seed == 0 else f"{name}_seed{seed}.safetensors")


# ---------------------------------------------------------------------------------------------- select
def select(args, model, out: Path) -> None:
    """Greedy accuracy (10 new tokens, the task's matcher) on the 100 held-out examples, both settings."""
    path = out / "task_selection_long.csv"
    names = args.tasks or list(FV_TASKS)
    # Instructed first for every task: it is the selection criterion.
    for instructed in (True, False):
        for name in names:
            # Re-read before each task: several processes may share the scan (each takes what is left).
            done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["task", "instructed"])
            if ((done.task == name) & (done.instructed == instructed)).any():
                continue
            task = hl.load_task(name, args.data_dir)
            start = time.perf_counter()
            acc = accuracy(model, task, instructed=instructed, max_new_tokens=10, batch_size=args.eval_batch_size)
            seconds = time.perf_counter() - start
            row = {
                "task": name,
                "instructed": instructed,
                "accuracy": acc,
                "n_examples": len(task.eval_pairs),
                "matcher": task.matcher,
                "seconds": round(seconds, 1),
            }
            pd.DataFrame([row]).to_csv(path, mode="a", header=not path.exists(), index=False)
            print(f"{name:28s} instructed={instructed!s:5s} acc={acc:.2f} ({seconds:.0f} s)", flush=True)
    long = pd.read_csv(path).drop_duplicates(["task", "instructed"])
    table = long.pivot_table(index="task", columns="instructed", values="accuracy").rename(
        columns={True: "instructed", False: "uninstructed"}
    )
    table = table.join(long.groupby("task")[["n_examples"]].first())
    table = table.join(long.groupby("task")[["seconds"]].sum().rename(columns={"seconds": "scan_seconds"}))
    table = table.sort_values(["instructed", "uninstructed"], ascending=False).reset_index()
    table.to_csv(out / "task_selection.csv", index=False)
    lines = ["| task | instructed | uninstructed | n |", "|---|---:|---:|---:|"]
    lines += [
        f"| {r.task} | {r.instructed:.2f} | {r.uninstructed:.2f} | {int(r.n_examples)} |"
        for r in table.itertuples()
        if pd.notna(r.instructed) and pd.notna(r.uninstructed)
    ]
    (out / "task_selection.md").write_text("\n".join(lines) + "\n")
    print(table.to_string(index=False))


# ---------------------------------------------------------------------------------------------- train
def train(args, model, out: Path) -> None:
    if not args.tasks:
        raise SystemExit("train: --tasks is required")
    tasks = [hl.load_task(name, args.data_dir) for name in args.tasks]
    config = fast_config(args)
    run_dir = Path(args.runs) / f"seed{args.seed}-{'+'.join(hl.training.safe_name(t) for t in args.tasks)}"
    start = time.perf_counter()
    results = hl.train_masks(model, tasks, config, out_dir=run_dir)
    seconds = time.perf_counter() - start
    (out / "masks").mkdir(parents=True, exist_ok=True)
    for name, result in results.items():
        result.mask.save(_mask_path(out, name, args.seed))
        result.history.to_csv(out / "masks" / f"{_mask_path(out, name, args.seed).stem}_history.csv", index=False)
        print(f"{name}: {result.mask.n_kept} heads kept of {result.mask.values.numel()}", flush=True)
    _record_time(
        out,
        "train",
        f"seed {args.seed}, {config.steps} steps x batch {config.batch_size}: {' '.join(args.tasks)}",
        seconds,
    )


# ---------------------------------------------------------------------------------------------- analyze
N_SIMILARITY = 10  # held-out inputs averaged in the layer-similarity figure


def _figure(args, fig, out: Path, stem: str) -> None:
    saved = save_figure(fig, out / stem, png=not args.no_png, root=figure_root(out))
    if saved.png is None and not args.no_png:
        print(f"PNG not written for {stem}: {saved.png_error}", flush=True)


def _seed0_tasks(out: Path) -> list[str]:
    """Tasks with a stored seed-0 mask, in the order of the task-selection table. Other masks in the
    folder (`<task>_seed<k>`, and the variants other scripts read: `_negative`, `_query`, `_mlp`) are
    not seed-0 masks of the paper's recipe."""
    masks = {p.stem: hl.HeadMask.load(p).metadata.get("task", p.stem) for p in (out / "masks").glob("*.safetensors")}
    names = sorted({task for stem, task in masks.items() if stem == hl.training.safe_name(task)})
    ranked = list(pd.read_csv(out / "task_selection.csv").task) if (out / "task_selection.csv").exists() else []
    return sorted(names, key=lambda n: (ranked.index(n) if n in ranked else len(ranked), n))


def evaluation(args, model, out: Path, task, mask: hl.HeadMask, extra: dict[str, hl.HeadMask], stage: str) -> None:
    """Tables 1/2 for one task: the paper's settings and the controls `evaluate` adds (no base-model
    twin: no "other model's mask"), plus the masked / random-mask rows of every other seed's mask.
    Writes `tables12_evaluation_<task>.csv` and every output behind it, `tables12_generations_<task>.csv`."""
    stem = hl.training.safe_name(task.name)
    start = time.perf_counter()
    config = EvalConfig(alpha=args.alpha, batch_size=args.eval_batch_size, random_seed=0)
    result = hl.evaluate(model, task, mask, config)
    tables, generations = [result.table], [result.generations]
    _record_time(out, stage, f"{task.name}: evaluate (settings table)", time.perf_counter() - start)
    for label, seed_mask in extra.items():  # other seeds of this task's mask: run-to-run spread
        if label.startswith(f"{stem} (seed "):
            start = time.perf_counter()
            seed = label[len(stem) + 2 : -1]
            seed_result = hl.evaluate(model, task, seed_mask, config)
            rows, texts = seed_result.table, seed_result.generations
            keep = ["masked", "random mask"]
            tables.append(rows[rows.setting.isin(keep)].assign(setting=lambda t: t.setting + f", {seed}"))
            generations.append(texts[texts.setting.isin(keep)].assign(setting=lambda t: t.setting + f", {seed}"))
            _record_time(out, stage, f"{label}: evaluate (masked, random mask)", time.perf_counter() - start)
    write_csv(out / f"tables12_evaluation_{stem}.csv", pd.concat(tables))
    write_csv(out / f"tables12_generations_{stem}.csv", pd.concat(generations))


def evaluate_only(args, model, out: Path) -> None:
    """Only the settings tables (`evaluation`) and the combined tables (`combine`): no sweeps, no alpha
    grid. A task whose generations file exists is skipped (delete it to redo), so the stage resumes."""
    names = args.tasks or _seed0_tasks(out)
    extra = _seed_masks(out, model)
    for name in names:
        if (out / f"tables12_generations_{hl.training.safe_name(name)}.csv").exists():
            if not add_seed_rows(args, out, hl.load_task(name, args.data_dir), model, extra):
                print(f"{name}: evaluated already (tables12_generations_{hl.training.safe_name(name)}.csv)", flush=True)
            continue
        mask = hl.HeadMask.load(_mask_path(out, name, 0), model)
        evaluation(args, model, out, hl.load_task(name, args.data_dir), mask, extra, "evaluate")
    combine(args, model, out)


def add_seed_rows(args, out: Path, task, model, extra: dict[str, hl.HeadMask]) -> bool:
    """Masked / random-mask rows of a seed mask stored after the task's table was written, appended
    to its table and generations (the reference rows are not rerun: greedy decoding repeats them) and
    their McNemar p-values computed against the stored reference rows (`rescore`). True if any."""
    stem = hl.training.safe_name(task.name)
    table = pd.read_csv(out / f"tables12_evaluation_{stem}.csv")
    texts = pd.read_csv(out / f"tables12_generations_{stem}.csv", keep_default_na=False, dtype=TEXT_COLUMNS)
    added = False
    for label, seed_mask in extra.items():
        seed = label[len(stem) + 2 : -1]
        if not label.startswith(f"{stem} (seed ") or f"masked, {seed}" in set(table.setting):
            continue
        start = time.perf_counter()
        config = EvalConfig(alpha=args.alpha, batch_size=args.eval_batch_size, settings=("masked", "random mask"))
        seed_result = hl.evaluate(model, task, seed_mask, config)
        rows, outputs = seed_result.table, seed_result.generations
        rename = {"masked": f"masked, {seed}", "random mask": f"random mask, {seed}"}
        at = table.index[table.setting.isin(["echo baseline", "majority label"])].min()  # controls stay last
        at = len(table) if pd.isna(at) else at
        new = rows.assign(setting=rows.setting.map(rename))[list(table.columns.intersection(rows.columns))]
        table = pd.concat([table.iloc[:at], new, table.iloc[at:]], ignore_index=True)
        texts = pd.concat([texts, outputs.assign(setting=outputs.setting.map(rename))], ignore_index=True)
        _record_time(out, "evaluate", f"{label}: evaluate (masked, random mask)", time.perf_counter() - start)
        added = True
    if added:
        rescored = rescore(task, table, texts)
        table, texts = rescored.table, rescored.generations
        write_csv(out / f"tables12_evaluation_{stem}.csv", table)
        write_csv(out / f"tables12_generations_{stem}.csv", texts)
    return added


def write_csv(path: Path, table: pd.DataFrame) -> None:
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))


def rescore_stored(args, model, out: Path) -> None:
    """`rescore`: every task with a stored generations file, its table rewritten in place."""
    for path in sorted(out.glob("tables12_generations_*.csv")):
        stem = path.stem.removeprefix("tables12_generations_")
        table = pd.read_csv(out / f"tables12_evaluation_{stem}.csv")
        task = hl.load_task(table.task.iloc[0], args.data_dir)
        rescored = rescore(task, table, pd.read_csv(path, keep_default_na=False, dtype=TEXT_COLUMNS))
        table, texts = rescored.table, rescored.generations
        write_csv(out / f"tables12_evaluation_{stem}.csv", table)
        write_csv(path, texts)
        print(f"{task.name}: rescored", flush=True)
    combine(args, model, out)


def analyze(args, model, out: Path) -> None:
    """Every table and figure from the stored masks (no training): per task `<artifact>_<task>.csv`,
    then the combined tables over every analysed task and the Jaccard table over every stored mask."""
    names = args.tasks or _seed0_tasks(out)
    if not names:
        raise SystemExit(f"analyze: no stored masks in {out / 'masks'}; run the train stage first")
    masks = {name: hl.HeadMask.load(_mask_path(out, name, 0), model) for name in names}
    extra = _seed_masks(out, model)
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    for name, mask in masks.items():
        task = hl.load_task(name, args.data_dir)
        stem = hl.training.safe_name(name)

        evaluation(args, model, out, task, mask, extra, "analyze")

        x, answer = task.eval_pairs[0]  # Fig. 2: one held-out input, the answer as the target token
        prompt = task.user_text(x)
        sweeps = []
        for order_name, order in (("weight", weight_order(mask)), ("random", random_order(model, seed=0))):
            start = time.perf_counter()
            sweep = hl.removal_sweep(model, prompt, order, target_tokens=[answer], max_new_tokens=args.new_tokens)
            _record_time(out, "analyze", f"{name}: removal sweep, {order_name} order", time.perf_counter() - start)
            sweep.long().to_csv(out / f"fig2_removal_ranks_{order_name}_{stem}.csv", index=False)
            pd.DataFrame({"step": sweep.steps, "generation": sweep.generations}).to_csv(
                out / f"fig2_generations_{order_name}_{stem}.csv", index=False
            )
            sweeps.append(
                {
                    "task": name,
                    "order": order_name,
                    "input": x,
                    "answer": answer,
                    "target_switch_step": sweep.switch_step,
                    "first_change_step": sweep.change_step,
                    "heads_in_mask": mask.n_kept,
                    "removed_by_mask": shape[0] * shape[1] - mask.n_kept,
                    "generation_at_mask": sweep.generations[shape[0] * shape[1] - mask.n_kept]
                    if order_name == "weight"
                    else None,
                }
            )
            _figure(
                args,
                rank_figure(sweep, title=f"SmolLM2, {name}: removal in {order_name} order, input {x!r}"),
                out,
                f"fig2_removal_ranks_{order_name}_{stem}",
            )
        pd.DataFrame(sweeps).to_csv(out / f"fig2_summary_{stem}.csv", index=False)

        start = time.perf_counter()  # Fig. 4: similarity to the instructed run, mean over held-out inputs
        pairs = {
            "original vs instructed": lambda u, i: (Setting(u), Setting(i)),
            "masked vs instructed": lambda u, i: (Setting(u, mask=mask), Setting(i)),
            "masked vs masked + instructed": lambda u, i: (Setting(u, mask=mask), Setting(i, mask=mask)),
        }
        similarity = {}
        rows = []
        for label, make in pairs.items():
            per_input = [
                hl.layer_similarity(model, *make(task.user_text(xi), task.user_text(xi, instructed=True)))
                for xi, _ in task.eval_pairs[:N_SIMILARITY]
            ]
            similarity[label] = pd.concat(per_input).groupby(level=0).mean(numeric_only=True)
            rows += [t.assign(comparison=label, example=k) for k, t in enumerate(per_input)]
        pd.concat(rows).to_csv(out / f"fig4_similarity_{stem}.csv", index=False)
        _figure(
            args,
            similarity_figure(
                similarity,
                title=f"SmolLM2, {name}: cosine similarity to the instructed run (mean of {N_SIMILARITY} inputs)",
            ),
            out,
            f"fig4_similarity_{stem}",
        )
        _record_time(out, "analyze", f"{name}: layer similarity", time.perf_counter() - start)

        start = time.perf_counter()  # Table 41: logit lens of the masked, uninstructed prompt
        lens = hl.logit_lens(model, prompt, k=5, mask=mask)
        lens.table.to_csv(out / f"table41_logit_lens_{stem}.csv", index=False)
        _figure(
            args,
            logit_lens_figure(lens, title=f"SmolLM2, {name}: logit lens, masked, input {x!r}"),
            out,
            f"table41_logit_lens_{stem}",
        )
        _record_time(out, "analyze", f"{name}: logit lens", time.perf_counter() - start)

        start = time.perf_counter()  # Fig. 6: instructed loss as the heads outside the mask are scaled by alpha
        grid = alpha_grid(model, task, mask, batch_size=args.eval_batch_size)
        grid.assign(task=name).to_csv(out / f"fig6_alpha_grid_{stem}.csv", index=False)
        _figure(
            args,
            alpha_figure(grid, title=f"SmolLM2, {name}: instructed answer loss vs alpha"),
            out,
            f"fig6_alpha_grid_{stem}",
        )
        _record_time(out, "analyze", f"{name}: alpha grid", time.perf_counter() - start)
    combine(args, model, out)


def _seed_masks(out: Path, model) -> dict[str, hl.HeadMask]:
    """Masks of seeds other than 0, labelled "<task> (seed k)"."""
    return {
        f"{p.stem.rsplit('_seed', 1)[0]} (seed {p.stem.rsplit('_seed', 1)[1]})": hl.HeadMask.load(p, model)
        for p in sorted((out / "masks").glob("*_seed*.safetensors"))
    }


def combine(args, model, out: Path) -> None:
    """The combined tables over every analysed task, Table 5 and the mask heat map over every stored
    mask (cheap: reads the per-task files; runs at the end of `analyze`)."""
    stored = _seed0_tasks(out)
    names = [n for n in stored if (out / f"tables12_evaluation_{hl.training.safe_name(n)}.csv").exists()]
    for artifact in ("tables12_evaluation", "fig2_summary", "fig6_alpha_grid"):
        table = pd.concat([pd.read_csv(out / f"{artifact}_{hl.training.safe_name(n)}.csv") for n in names])
        table.to_csv(out / f"{artifact}.csv", index=False)
    every = {
        **{n: hl.HeadMask.load(_mask_path(out, n, 0), model) for n in stored},
        **_seed_masks(out, model),
    }  # Table 5: Jaccard between masks vs the random expectation
    table5 = jaccard_table(every)
    table5.to_csv(out / "table5_jaccard.csv", index=False)
    _figure(
        args,
        jaccard_figure(
            jaccard_matrix(every),
            table=table5,
            title="SmolLM2: Jaccard similarity of the learned masks (p: exact overlap test)",
        ),
        out,
        "table5_jaccard",
    )
    _figure(args, mask_heatmap(every, title="SmolLM2: learned masks (1 = kept)"), out, "masks")
    summary = pd.read_csv(out / "tables12_evaluation.csv")
    (out / "tables12_summary.md").write_text(readme_tables(summary))
    print(summary[["task", "setting", "n_kept", "n_examples", "answer_nll", "accuracy"]].to_string(index=False))


SUMMARY_SETTINGS = (
    "original",
    "instructed",
    "masked",
    "random mask",
    "instructed + scaled mask",
    "echo baseline",
    "majority label",
)


def readme_tables(table: pd.DataFrame) -> str:
    """The README's two tables from the combined settings table: accuracy by the paper's matcher / the
    strict one per setting, then the masked and instructed rows with 95% Wilson intervals, echo and
    empty counts, McNemar p-values and (label tasks) balanced accuracy. Tasks evaluated before these
    columns existed show "n/a" in the first table and are left out of the second."""

    def pair(row) -> str:
        strict = f"{row.strict:.2f}" if "strict" in row and pd.notna(row.strict) else "n/a"
        return f"{row.accuracy:.2f} / {strict}"

    def ci(row, column: str) -> str:
        if f"{column}_low" not in row or pd.isna(row[f"{column}_low"]):
            return "n/a"
        return f"{row[column]:.2f} [{row[f'{column}_low']:.2f}, {row[f'{column}_high']:.2f}]"

    def num(row, column: str, fmt: str) -> str:
        return format(row[column], fmt) if column in row and pd.notna(row[column]) else "n/a"

    lines = ["| task (n) | " + " | ".join(SUMMARY_SETTINGS) + " |", "|---|" + "---:|" * len(SUMMARY_SETTINGS)]
    detail = [
        "| task | setting | paper matcher [95% CI] | strict [95% CI] | echo | empty | p vs original | "
        "p vs instructed | balanced accuracy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task, rows in table.groupby("task", sort=False):
        rows = rows.set_index("setting")
        cells = [pair(rows.loc[s]) if s in rows.index else "" for s in SUMMARY_SETTINGS]
        lines.append(f"| {task} ({int(rows.n_examples.iloc[0])}) | " + " | ".join(cells) + " |")
        if "strict" not in rows or rows.strict.isna().all():  # evaluated before the second reading existed
            continue
        for setting in [s for s in rows.index if s in ("original", "instructed") or s.startswith("masked")]:
            row = rows.loc[setting]
            detail.append(
                f"| {task} | {setting} | {ci(row, 'accuracy')} | {ci(row, 'strict')} | {num(row, 'echo', '.0f')} "
                f"| {num(row, 'empty', '.0f')} | {num(row, 'p_vs_original', '.2g')} | "
                f"{num(row, 'p_vs_instructed', '.2g')} | {num(row, 'balanced_accuracy', '.2f')} |"
            )
    return "\n".join(lines) + "\n\n" + "\n".join(detail) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.data_dir:
        os.environ["HEADSUP_DATA_DIR"] = args.data_dir
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = None
    if args.stage not in ("combine", "rescore"):  # these only read the stored files
        start = time.perf_counter()
        model = hl.load_model(args.model)
        _record_time(out, args.stage, "load model", time.perf_counter() - start)
    {
        "select": select,
        "train": train,
        "analyze": analyze,
        "evaluate": evaluate_only,
        "rescore": rescore_stored,
        "combine": combine,
    }[args.stage](args, model, out)


if __name__ == "__main__":
    main()
