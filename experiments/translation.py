"""The paper's translation experiments (Table 1, Fig. 2, Fig. 4, Table 8) on SmolLM2-135M-Instruct.

Stages, each calling only the library and writing to `figures/smollm2/translation/` (`--out`):

    python experiments/translation.py scan                      # instructed translation en -> each language, small sample
    python experiments/translation.py train --pairs en-fr en-es # masks without instruction (TrainConfig.fast)
    python experiments/translation.py analyze --pairs en-fr en-es   # Table 1 rows, Fig. 2, Fig. 4, Table 8

`scan` generates (instructed, greedy, 50 new tokens) for the first `--scan-n` training pairs of every
direction en -> xx and writes `scan_generations.csv` and `scan.csv` (target-language share, the
paper's ROUGE-L); directions already in the CSV are skipped. `train` trains one mask per direction
(`train_masks`, one pass, resumable from its run folder under `--runs`, git-ignored) and keeps the
final masks in `<out>/masks/`. `analyze` evaluates the stored masks on the 100 held-out pairs and
runs the removal sweeps; each artifact is skipped when its file exists (rerun to resume). Every
stage appends its wall time to `<out>/times.csv`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
import torch

import headsup_lens as hl

ROOT = Path(__file__).resolve().parents[1]
SCAN_TARGETS = ("fr", "de", "es", "zh", "ru", "ar")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=("scan", "train", "analyze"))
    p.add_argument("--model", default="smollm2", help="model name or local directory (default: smollm2)")
    p.add_argument("--pairs", nargs="+", default=None, help="directions src-tgt (scan: default en-{fr,de,es,zh,ru,ar})")
    p.add_argument("--data-dir", default=None, help="data directory (default: $HEADSUP_DATA_DIR)")
    p.add_argument("--out", default=str(ROOT / "figures" / "smollm2" / "translation"),
                   help="output folder (default: figures/smollm2/translation)")
    p.add_argument("--runs", default=str(ROOT / "runs" / "smollm2_translation"),
                   help="training run folders with checkpoints (default: runs/smollm2_translation, git-ignored)")
    p.add_argument("--scan-n", type=int, default=30, help="scan: training pairs per direction (default: 30)")
    p.add_argument("--seed", type=int, default=0, help="train: TrainConfig.fast(seed=...) (default: 0)")
    p.add_argument("--steps", type=int, default=None, help="train: override the 300 steps of TrainConfig.fast")
    p.add_argument("--batch-size", type=int, default=None, help="train: override the batch of 16 per task")
    p.add_argument("--eval-batch-size", type=int, default=32, help="examples per forward pass / generation")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    p.add_argument("--no-png", action="store_true", help="write HTML figures only")
    return p


def _record_time(out: Path, stage: str, what: str, seconds: float) -> None:
    path = out / "times.csv"
    row = pd.DataFrame([{"stage": stage, "what": what, "seconds": round(seconds, 1),
                         "threads": torch.get_num_threads()}])
    row.to_csv(path, mode="a", header=not path.exists(), index=False)
    print(f"[{stage}] {what}: {seconds:.1f} s", flush=True)


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
        prompts = [hl.data.encode_prompt(model, task.user_text(x, instructed=True), template=template)
                   for x, _ in sample]
        start = time.perf_counter()
        texts = hl.evaluation.generate_answers(model, prompts, max_new_tokens=task.max_new_tokens,
                                               batch_size=args.eval_batch_size)
        _record_time(out, "scan", f"{pair}: {len(sample)} instructed generations", time.perf_counter() - start)
        rows = pd.DataFrame({"pair": pair, "source": [x for x, _ in sample], "reference": [y for _, y in sample],
                             "generation": texts})
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
        record = {"pair": pair, "n": len(group),
                  "target_language_share": target_language_share(texts, tgt),
                  "target_language_share_whole": target_language_share(texts, tgt, part="whole"),
                  "rouge_l": paper_rouge_l(texts, refs)}
        if model is not None:
            record["rouge_l_model_tokenizer"] = paper_rouge_l(texts, refs, tokenizer=model.tokenizer)
        record.update(rouge_l_first_line=rouge_l(lines, refs, char_level=tgt in CHAR_LEVEL_LANGUAGES),
                      bleu=paper_bleu(texts, refs),
                      sacrebleu_first_line=bleu(lines, refs, char_level=tgt in CHAR_LEVEL_LANGUAGES))
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
    changes = {"seed": args.seed}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.batch_size is not None:
        changes["batch_size"] = args.batch_size
    config = hl.TrainConfig.fast(**changes)
    run_dir = Path(args.runs) / f"seed{args.seed}-{config.steps}x{config.batch_size}-{'+'.join(args.pairs)}"
    start = time.perf_counter()
    results = hl.train_masks(model, tasks, config, out_dir=run_dir)
    seconds = time.perf_counter() - start
    (out / "masks").mkdir(parents=True, exist_ok=True)
    for pair, (name, result) in zip(args.pairs, results.items()):
        result.mask.save(_mask_path(out, pair))
        result.history.to_csv(out / "masks" / f"translation_{pair}_history.csv", index=False)
        print(f"{name}: {result.mask.n_kept} heads kept of {result.mask.values.numel()}", flush=True)
    _record_time(out, "train", f"seed {args.seed}, {config.steps} steps x batch {config.batch_size}: "
                 f"{' '.join(args.pairs)} (this process's wall time; resumed runs count the last part only)", seconds)


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
    {"scan": scan, "train": train}[args.stage](args, model, out)


if __name__ == "__main__":
    main()
