"""`headsup evaluate`: the paper's settings table for one task and mask."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..options import DataOptions, Given, ModelOptions, model_arguments
from ._registry import check_out_dir, command, mask_file

PARTIAL = "results.partial.csv"  # the finished rows of an interrupted run; results.csv is left as it was


@dataclass
class EvaluateCommand(DataOptions, ModelOptions):
    """Options of `headsup evaluate`."""

    task: str
    """Task name, e.g. `organism/reverse` or `antonym` (`headsup tasks` lists them)."""
    mask: str
    """Mask file (safetensors) trained for this model, or a `headsup train` output folder holding mask.safetensors."""
    out: str
    """Output folder for results.csv and generations.csv, every output behind the table (results.partial.csv
    holds the finished rows while it runs)."""
    other_mask: str | None = None
    """Mask (file or folder) of another model of the same architecture (base <-> instruct swap)."""
    alpha: float = 0.25
    """Scale of the heads outside the mask in the "instructed + scaled mask" setting."""
    gate: str = "value"
    """Gate: value (hook_z) or query (uniform attention)."""
    split: str = "eval"
    """Split to evaluate: eval (the last 100 pairs), train or all."""
    batch_size: int = 16
    """Examples per forward pass / generation batch."""
    max_new_tokens: int | None = None
    """Greedy tokens per answer (default: the task's, 10 for simple tasks, 50 for sentence translation)."""
    generate: bool = True
    """Generate greedy answers for accuracy, ROUGE-L and BLEU (--no-generate: only the answer loss)."""
    text_metrics: str = "auto"
    """ROUGE-L and BLEU columns: auto (every translation task, and answers of more than two words on average), on or off."""
    text_style: str = "paper"
    """Text metrics: paper (whole-generation ROUGE-L, Table 8's sentence BLEU 0-1) or first-line (lower-cased words ROUGE-L, sacreBLEU 0-100, on the first line)."""


@command("evaluate", EvaluateCommand, help="Compare original, instructed, masked and baseline settings on a task.")
def run_evaluate(args: EvaluateCommand, given: Given) -> int:
    from .._io import atomic_write
    from ..data import load_task
    from ..evaluation import evaluate
    from ..masks import HeadMask
    from ..models import load_model

    text_metrics = {"auto": None, "on": True, "off": False}.get(args.text_metrics, "bad")
    if text_metrics == "bad":
        raise ValueError(f"--text-metrics must be auto, on or off, not {args.text_metrics!r}")
    text_style = args.text_style.replace("-", "_")
    if text_style not in ("paper", "first_line"):
        raise ValueError(f"--text-style must be paper or first-line, not {args.text_style!r}")
    task = load_task(args.task, args.data_dir)
    mask_path = mask_file(args.mask)
    other_path = mask_file(args.other_mask, "--other-mask") if args.other_mask else None
    out = check_out_dir(args.out)
    model = load_model(args.model, **model_arguments(args))
    mask = HeadMask.load(mask_path, model)
    other = HeadMask.load(other_path, model, allow_other_weights=True) if other_path else None  # the swap setting
    target, partial = Path(out) / "results.csv", Path(out) / PARTIAL

    def save(table, path: Path = partial) -> Path:  # after every setting: an interruption keeps the finished rows
        return atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))

    table, texts = evaluate(
        model,
        task,
        mask,
        other_mask=other,
        alpha=args.alpha,
        gate=args.gate,
        split=args.split,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        generate=args.generate,
        text_metrics=text_metrics,
        text_style=text_style,
        on_row=save,
        return_generations=True,
    )
    if len(
        texts
    ):  # every output behind the table, with its per-example scores (before results.csv, which ends the set)
        print(f"wrote {atomic_write(Path(out) / 'generations.csv', lambda tmp: texts.to_csv(tmp, index=False))}")
    written = save(table, target)  # results.csv only ever holds a complete table
    partial.unlink(missing_ok=True)
    print(table.to_string(index=False))
    print(f"wrote {written}")
    return 0
