"""`headsup evaluate`: the paper's settings table for one task and mask.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..evaluation import EvalConfig
from ..options import DataOptions, Given, ModelOptions, ShardOptions, model_arguments, option
from ._outputs import compact_table, report
from ._registry import check_out_dir, command, mask_file, ranks_of

# The columns `evaluate` prints, those that exist for the task, first first (results.csv holds them all).
SHOWN = [
    "setting",
    "accuracy",
    "strict",
    "echo",
    "empty",
    "answer_nll",
    "n_kept",
    "balanced_accuracy",
    "rouge_l",
    "bleu",
    "rouge_l_first_line",
    "sacrebleu_first_line",
    "target_language_share",
    "p_vs_original",
    "p_vs_instructed",
]


@dataclass(frozen=True)
class EvaluateCommand(ShardOptions, DataOptions, ModelOptions):
    """Options of `headsup evaluate`."""

    task: str
    """Task name, e.g. `organism/reverse` or `antonym` (`headsup tasks` lists them)."""
    mask: str
    """Mask file (safetensors) trained for this model, or a `headsup train` output folder holding mask.safetensors."""
    out: str
    """Output folder for results.csv, generations.csv (every output behind the table) and evaluation.json; an
    interrupted run keeps its finished settings in results.partial.csv and the next run resumes from them."""
    other_mask: str | None = None
    """Mask (file or folder) of another model of the same architecture (base <-> instruct swap)."""
    evaluation: EvalConfig = option(default_factory=EvalConfig, group="Evaluation")
    """How the settings are run and scored."""


def check_evaluate(args: EvaluateCommand, given: Given) -> None:
    mask_file(args.mask)
    if args.other_mask:
        mask_file(args.other_mask, "--other-mask")


@command("evaluate", EvaluateCommand, check=check_evaluate)
def run_evaluate(args: EvaluateCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..data import load_task  # deferred: the task registry is not needed for --help
    from ..evaluation import evaluate
    from ..evaluation._evaluate import GENERATIONS, RECORD, RESULTS
    from ..masks import HeadMask
    from ..models import load_model

    task = load_task(args.task, args.data_dir)
    mask_path = mask_file(args.mask)
    other_path = mask_file(args.other_mask, "--other-mask") if args.other_mask else None
    out = check_out_dir(args.out)
    rank, device = ranks_of(args)  # under torchrun: the examples are split over the ranks, rank 0 writes
    model = load_model(args.model, **{**model_arguments(args), "device": device, "shard": args.shard})
    mask = HeadMask.load(mask_path, model)
    other = HeadMask.load(other_path, model, allow_other_weights=True) if other_path else None  # the swap setting
    result = evaluate(model, task, mask, args.evaluation, other_mask=other, out_dir=out, distributed=rank is not None)
    if rank:  # under torchrun rank 0 alone writes and reports
        return 0
    print(f"{task.name}, {int(result.table.n_examples.max())} examples of its {args.evaluation.split} split:")
    print(compact_table(result.table, SHOWN, full=RESULTS))
    report(out, [name for name in (RESULTS, GENERATIONS, RECORD) if (out / name).is_file()])
    return 0
