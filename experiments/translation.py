"""The paper's translation experiments (Table 1, Fig. 2, Fig. 4, Table 8) on SmolLM2-135M-Instruct.

Stages, each calling only the library and writing to `figures/smollm2/translation/` (`--out`):

    python experiments/translation.py scan                      # instructed translation en -> each language, small sample
    python experiments/translation.py train --pairs en-fr en-es # masks without instruction (TrainConfig.fast)
    python experiments/translation.py analyze --pairs en-fr en-es   # Table 1 rows, Fig. 2, Fig. 4, Table 8

`scan` generates (instructed, greedy, 50 new tokens) for the first `--scan-n` training pairs of every
direction en -> xx and writes `scan_generations.csv` and `scan.csv` (target-language share, the
paper's ROUGE-L); directions already in the CSV are skipped. `train` trains one mask per direction
(`train_masks`, one pass, resumable from its run folder under `--runs`, git-ignored) and keeps the
final masks in `<out>/masks/`. `analyze` evaluates the stored masks on the 100 held-out pairs
(`evaluate`, which resumes from the settings an interrupted run finished) and runs the removal sweeps
(each sweep is skipped when its file exists). Every stage appends its wall time to `<out>/times.csv`.
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
from headsup_lens.evaluation import EvalConfig, evaluate

ROOT = Path(__file__).resolve().parents[1]
SCAN_TARGETS = ("fr", "de", "es", "zh", "ru", "ar")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=("scan", "train", "analyze"))
    p.add_argument("--model", default="smollm2", help="model name or local directory (default: smollm2)")
    p.add_argument("--pairs", nargs="+", default=None, help="directions src-tgt (scan: default en-{fr,de,es,zh,ru,ar})")
    p.add_argument("--data-dir", default=None, help="data directory (default: $HEADSUP_DATA_DIR)")
    p.add_argument(
        "--out",
        default=str(ROOT / "figures" / "smollm2" / "translation"),
        help="output folder (default: figures/smollm2/translation)",
    )
    p.add_argument(
        "--runs",
        default=str(ROOT / "runs" / "smollm2_translation"),
        help="training run folders with checkpoints (default: runs/smollm2_translation, git-ignored)",
    )
    p.add_argument("--scan-n", type=int, default=30, help="scan: training pairs per direction (default: 30)")
    p.add_argument("--seed", type=int, default=0, help="train: TrainConfig.fast(seed=...) (default: 0)")
    p.add_argument("--steps", type=int, default=None, help="train: override the 300 steps of TrainConfig.fast")
    p.add_argument("--batch-size", type=int, default=None, help="train: override the batch of 16 per task")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=10,
        help="train: save the resume state every this many steps (default: 10; a step takes minutes on a loaded CPU)",
    )
    p.add_argument("--alpha", type=float, default=0.25, help="analyze: alpha of the instructed + scaled mask row")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=("table1", "fig2", "table8"),
        default=None,
        help="analyze: which artifacts (default: all)",
    )
    p.add_argument(
        "--new-tokens", type=int, default=20, help="analyze: greedy tokens per removal-sweep step (default: 20)"
    )
    p.add_argument(
        "--iwslt-n", type=int, default=100, help="analyze: IWSLT 2017 test pairs for Table 8 (default: the first 100)"
    )
    p.add_argument(
        "--table8-alpha",
        type=float,
        default=None,
        help="analyze: alpha of Table 8's masked row (default: the paper's per direction: en-de 0.3, en-fr 0.2, en-zh 0.1)",
    )
    p.add_argument("--eval-batch-size", type=int, default=32, help="examples per forward pass / generation")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    p.add_argument("--no-png", action="store_true", help="write HTML figures only")
    return p


# ---------------------------------------------------------------------------------------------- scan
def scan(args, model, out: Path) -> None:
    """Instructed greedy translations of the first `--scan-n` training pairs of each direction."""
    path = out / "scan_generations.csv"
    pairs = args.pairs or [f"en-{t}" for t in SCAN_TARGETS]
    for pair in pairs:
        done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["pair"])
        if (done.pair == pair).any():
            continue
        task = hl.load_task(f"translation/{pair}", args.data_dir)
        sample = task.train_pairs[: args.scan_n]
        template = hl.models.prompt_format(model)
        prompts = [
            hl.data.encode_prompt(model, task.user_text(x, instructed=True), template=template) for x, _ in sample
        ]
        start = time.perf_counter()
        texts = hl.evaluation.generate_answers(
            model, prompts, max_new_tokens=task.max_new_tokens, batch_size=args.eval_batch_size
        )
        _record_time(out, "scan", f"{pair}: {len(sample)} instructed generations", time.perf_counter() - start)
        rows = pd.DataFrame(
            {"pair": pair, "source": [x for x, _ in sample], "reference": [y for _, y in sample], "generation": texts}
        )
        rows.to_csv(path, mode="a", header=not path.exists(), index=False)
    summarize_scan(out, model)


def summarize_scan(out: Path, model=None) -> pd.DataFrame:
    """Per direction: target-language share (first line and whole generation), the paper's ROUGE-L
    with the default tokenizer and with the model's own (subword) tokenizer, the first-line ROUGE-L
    of earlier versions, Table 8's BLEU and first-line sacreBLEU: the metrics' definitions side by side."""
    from headsup_lens.data._sources import CHAR_LEVEL_LANGUAGES
    from headsup_lens.evaluation import bleu, first_line, paper_bleu, paper_rouge_l, rouge_l, target_language_share

    rows = pd.read_csv(out / "scan_generations.csv", keep_default_na=False)
    table = []
    for pair, group in rows.groupby("pair", sort=False):
        tgt = pair.split("-")[1]
        texts, refs = list(group.generation), list(group.reference)
        lines = [first_line(t) for t in texts]
        record = {
            "pair": pair,
            "n": len(group),
            "target_language_share": target_language_share(texts, tgt),
            "target_language_share_whole": target_language_share(texts, tgt, part="whole"),
            "rouge_l": paper_rouge_l(texts, refs),
        }
        if model is not None:
            record["rouge_l_model_tokenizer"] = paper_rouge_l(texts, refs, tokenizer=model.tokenizer)
        record.update(
            rouge_l_first_line=rouge_l(lines, refs, char_level=tgt in CHAR_LEVEL_LANGUAGES),
            bleu=paper_bleu(texts, refs),
            sacrebleu_first_line=bleu(lines, refs, char_level=tgt in CHAR_LEVEL_LANGUAGES),
        )
        # A floor: each generation scored against the next pair's reference (a wrong sentence in the
        # right language). Character n-grams give Latin-script text a high floor.
        shifted = refs[1:] + refs[:1]
        record.update(
            rouge_l_shifted_references=paper_rouge_l(texts, shifted), bleu_shifted_references=paper_bleu(texts, shifted)
        )
        table.append(record)
    table = pd.DataFrame(table).sort_values("target_language_share", ascending=False)
    table.to_csv(out / "scan.csv", index=False)
    print(table.to_string(index=False))
    return table


# ---------------------------------------------------------------------------------------------- train
def _mask_path(out: Path, pair: str) -> Path:
    return out / "masks" / f"translation_{pair}.safetensors"


def train(args, model, out: Path) -> None:
    """One mask per direction, trained together without instruction (`TrainConfig.fast`, resumable)."""
    if not args.pairs:
        raise SystemExit("train: --pairs is required")
    tasks = [hl.load_task(f"translation/{pair}", args.data_dir) for pair in args.pairs]
    config = fast_config(args, checkpoint_every=args.checkpoint_every)
    run_dir = Path(args.runs) / f"seed{args.seed}-{config.steps}x{config.batch_size}-{'+'.join(args.pairs)}"
    start = time.perf_counter()
    results = hl.train_masks(model, tasks, config, out_dir=run_dir)
    seconds = time.perf_counter() - start
    (out / "masks").mkdir(parents=True, exist_ok=True)
    for pair, (name, result) in zip(args.pairs, results.items()):
        result.mask.save(_mask_path(out, pair))
        result.history.to_csv(out / "masks" / f"translation_{pair}_history.csv", index=False)
        print(f"{name}: {result.mask.n_kept} heads kept of {result.mask.values.numel()}", flush=True)
    _record_time(
        out,
        "train",
        f"seed {args.seed}, {config.steps} steps x batch {config.batch_size}: "
        f"{' '.join(args.pairs)} (this process's wall time; resumed runs count the last part only)",
        seconds,
    )


# ---------------------------------------------------------------------------------------------- analyze
ECHO = "echo baseline (source as output)"


def _names(alpha: float) -> dict[str, str]:
    """This script's row names for `evaluate`'s settings (the scaled row carries its alpha)."""
    return {"instructed + scaled mask": f"instructed + scaled mask (alpha {alpha:g})", "echo baseline": ECHO}


def table1(args, model, out: Path, pair: str) -> pd.DataFrame:
    """Table 1 rows for one direction on the held-out pairs (`evaluate`; the mask rows only once a mask
    is stored): answer loss (the paper's "PPL"), the paper's ROUGE-L, Table 8's BLEU and the
    target-language share, and the echo control (the English source copied as the output: shared names
    and cognates score without translating). The evaluation and every generation are in
    `table1_<pair>_evaluation/`; an interrupted run resumes from the settings it finished."""
    task = hl.load_task(f"translation/{pair}", args.data_dir)
    mask = hl.HeadMask.load(_mask_path(out, pair), model) if _mask_path(out, pair).exists() else None
    config = EvalConfig(alpha=args.alpha, batch_size=args.eval_batch_size, random_seed=0)
    start = time.perf_counter()
    result = evaluate(model, task, mask, config, out_dir=out / f"table1_{pair}_evaluation")
    _record_time(
        out, "analyze", f"{pair}: Table 1 ({len(task.eval_pairs)} held-out pairs)", time.perf_counter() - start
    )
    table = result.table.assign(pair=pair, setting=result.table.setting.replace(_names(args.alpha)))
    table = table.rename(columns={"n_examples": "n"})
    table = table[["pair", "setting", "n_kept", "n", "answer_nll", "rouge_l", "bleu", "target_language_share"]]
    table.to_csv(out / f"table1_{pair}.csv", index=False)
    print(table.to_string(index=False), flush=True)
    return table


def fig2(args, model, out: Path, pair: str) -> None:
    """Fig. 2 on one held-out input without instruction: heads removed one by one in weight, influence
    (App. C.3.1) and random order; ranks of the reference's first token, the greedy generation at each
    step, its language (py3langid, first line) and the first step that answers in the target language."""
    from headsup_lens.analysis import influence_order, random_order, weight_order
    from headsup_lens.evaluation import first_line, identify_language
    from headsup_lens.plots import rank_figure, save_figure

    mask_path = _mask_path(out, pair)
    if not mask_path.exists():
        print(f"fig2 {pair}: no stored mask ({mask_path}); run the train stage first", flush=True)
        return
    mask = hl.HeadMask.load(mask_path, model)
    task = hl.load_task(f"translation/{pair}", args.data_dir)
    tgt = pair.split("-")[1]
    x, answer = task.eval_pairs[0]
    summary, sweeps = [], {}
    for order_name in ("weight", "influence", "random"):
        stem = f"fig2_{order_name}_{pair}"
        if (out / f"{stem}_generations.csv").exists():
            continue
        if order_name == "influence" and "weight" not in sweeps:
            continue  # needs this run's weight-order sweep (rerun with the weight files removed)
        order = {
            "weight": lambda: weight_order(mask),
            "random": lambda: random_order(model, seed=0),
            "influence": lambda: influence_order(sweeps["weight"]),
        }[order_name]()
        start = time.perf_counter()
        sweep = hl.removal_sweep(
            model, task.user_text(x), order, target_tokens=[answer], max_new_tokens=args.new_tokens
        )
        sweeps[order_name] = sweep
        _record_time(out, "analyze", f"{pair}: removal sweep, {order_name} order", time.perf_counter() - start)
        languages = [identify_language(first_line(g)) for g in sweep.generations]
        language_step = next((s for s, lang in zip(sweep.steps, languages) if lang == tgt), None)
        sweep.long().to_csv(out / f"{stem}_ranks.csv", index=False)
        pd.DataFrame({"step": sweep.steps, "generation": sweep.generations, "language": languages}).to_csv(
            out / f"{stem}_generations.csv", index=False
        )
        fig = rank_figure(sweep, title=f"SmolLM2, {pair} without instruction: removal in {order_name} order")
        if language_step is not None:
            fig.add_vline(
                x=language_step,
                line_dash="dash",
                line_color="green",
                annotation_text=f"first {tgt} answer (step {language_step})",
            )
        save_figure(fig, out / stem, png=not args.no_png, root=figure_root(out))
        n_removed = model.cfg.n_layers * model.cfg.n_heads - mask.n_kept
        summary.append(
            {
                "pair": pair,
                "order": order_name,
                "input": x,
                "answer": answer,
                "target_switch_step": sweep.switch_step,
                "first_change_step": sweep.change_step,
                "target_language_step": language_step,
                "removed_by_mask": n_removed,
                "generation_at_0": sweep.generations[0],
                "generation_at_mask": sweep.generations[n_removed] if order_name == "weight" else None,
            }
        )
    if summary:
        path = out / f"fig2_summary_{pair}.csv"
        pd.DataFrame(summary).to_csv(path, mode="a", header=not path.exists(), index=False)


# The paper's alpha per direction for Table 8 (its evaluation scales the heads outside the mask by these).
PAPER_TABLE8_ALPHA = {"en-de": 0.3, "en-fr": 0.2, "en-zh": 0.1, "zh-en": 0.3, "fr-en": 0.2, "de-en": 0.4}


def table8(args, model, out: Path, pair: str) -> None:
    """Table 8: BLEU (the reference's procedure, 0-1) on the first `--iwslt-n` IWSLT 2017 test pairs,
    instructed ("Translate into de:", as the reference writes it), without and with the direction's mask
    (heads outside it scaled by the paper's alpha, or `--table8-alpha`), and the echo control (`evaluate`,
    in `table8_<pair>_evaluation/`)."""
    full = hl.load_task(f"iwslt2017/{pair}", args.data_dir)
    task = hl.data.Task(
        full.name,
        full.pairs[: args.iwslt_n],
        full.instruction,
        full.matcher,
        args.iwslt_n,
        max_new_tokens=full.max_new_tokens,
        target_language=full.target_language,
    )
    mask_path = _mask_path(out, pair)
    alpha = args.table8_alpha if args.table8_alpha is not None else PAPER_TABLE8_ALPHA[pair]
    mask = hl.HeadMask.load(mask_path, model) if mask_path.exists() else None
    settings = ("instructed", "instructed + scaled mask", "echo baseline") if mask else ("instructed", "echo baseline")
    config = EvalConfig(alpha=alpha, batch_size=args.eval_batch_size, settings=settings)
    start = time.perf_counter()
    result = evaluate(model, task, mask, config, out_dir=out / f"table8_{pair}_evaluation")
    _record_time(out, "analyze", f"{pair}: Table 8 ({len(task.pairs)} IWSLT pairs)", time.perf_counter() - start)
    table = result.table.assign(pair=pair, setting=result.table.setting.replace(_names(alpha)))
    table = table.rename(columns={"n_examples": "n"})[["pair", "setting", "n", "bleu", "target_language_share"]]
    table.to_csv(out / f"table8_{pair}.csv", index=False)
    print(table.to_string(index=False), flush=True)


def analyze(args, model, out: Path) -> None:
    if not args.pairs:
        raise SystemExit("analyze: --pairs is required")
    parts = args.parts or ["table1", "fig2", "table8"]
    for pair in args.pairs:
        if "table1" in parts:
            table1(args, model, out, pair)
        if "fig2" in parts:
            fig2(args, model, out, pair)
        if "table8" in parts:
            table8(args, model, out, pair)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.data_dir:
        os.environ["HEADSUP_DATA_DIR"] = args.data_dir
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model = hl.load_model(args.model)
    _record_time(out, args.stage, "load model", time.perf_counter() - start)
    {"scan": scan, "train": train, "analyze": analyze}[args.stage](args, model, out)


if __name__ == "__main__":
    main()
