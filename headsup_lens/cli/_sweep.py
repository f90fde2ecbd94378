"""`headsup sweep`: remove heads one by one and track the target tokens' ranks and the continuations (Fig. 2).

Heavy modules are imported inside the command, so `--help` answers at once."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from .._io import OutputSet, atomic_write_json
from ..analysis._config import SweepConfig
from ..options import FigureOptions, Given, ModelOptions, PromptOptions, ShardOptions, check_counts, option
from ._outputs import file_names, load, load_mask, portable, refuse_unused, report, save_figures, write_csv
from ._registry import check_out_dir, command, mask_file, ranks_of


@dataclass(frozen=True)
class SweepCommand(ShardOptions, FigureOptions, PromptOptions, ModelOptions):
    """Options of `headsup sweep`."""

    out: str
    """Output folder: ranks.csv, logits.csv, generations.csv, tokens.csv, summary.json and figures."""
    mask: str | None = None
    """Mask file (or `headsup train` output folder) whose weights give the removal order (weight and influence orders)."""
    order: Literal["weight", "influence", "random"] = "weight"
    """Removal order: weight (ascending sigmoid(M)), influence (App. C.3.1) or random."""
    influence_k: int | None = None
    """Influence order: how many first heads of the weight order are re-ordered (paper: 320 of 1024; default all)."""
    target: list[str] = field(default_factory=list)
    """Target tokens as text (its first token is tracked; `8` is the text "8"); repeat --target or give several."""
    target_id: list[int] = field(default_factory=list)
    """Target tokens as token ids of the model's vocabulary, e.g. --target-id 8 42."""
    seed: int = 0
    """Seed of the random order."""
    reference_prompt: str | None = None
    """Also compare every layer along the sweep with this prompt's run (e.g. the instructed user text; Fig. 5)."""
    sweep: SweepConfig = option(default_factory=SweepConfig, group="Sweep")
    """What each step tracks and how the steps run (`removal_sweep`'s config)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, influence_k=1, seed=0)
        if self.order != "random" and self.mask is None:
            raise ValueError(f"the {self.order} order needs --mask")
        if self.order == "influence" and not (self.target or self.target_id):
            raise ValueError("the influence order needs at least one --target or --target-id")


def check_sweep(args: SweepCommand, given: Given) -> None:
    """Options the chosen order does not use are refused, not ignored; the mask file must exist."""
    if args.order == "random":
        refuse_unused(
            args, given, ("mask",), "the random order does not read a mask; leave it out or use --order weight"
        )
    else:
        refuse_unused(args, given, ("seed",), f"--seed draws the random order only, not the {args.order} order")
    if args.order != "influence":
        refuse_unused(args, given, ("influence_k",), f"--influence-k applies to --order influence, not {args.order}")
    if args.mask is not None:
        mask_file(args.mask)


@command("sweep", SweepCommand, check=check_sweep)
def run_sweep(args: SweepCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    import pandas as pd

    from .._distributed import from_rank0
    from ..analysis import (
        Setting,
        influence_order,
        layer_states,
        random_order,
        removal_sweep,
        step_or_never,
        sweep_similarity,
    )
    from ..plots import generation_table, logit_figure, rank_figure, sweep_similarity_figure

    out = check_out_dir(args.out)
    tables = ["ranks.csv", "logits.csv", "tokens.csv", "generations.csv", "summary.json"]
    tables += ["sweep_similarity.csv"] if args.reference_prompt is not None else []
    rank, device = ranks_of(args)  # under torchrun: the steps are split over the ranks, rank 0 writes
    stage = None

    def claim() -> None:  # another command's files: refused before any work
        nonlocal stage
        stage = OutputSet(out, "sweep", option="--out", files=tables)

    from_rank0(claim) if rank is not None else claim()
    model = load(args, device=device, shard=args.shard)
    mask = load_mask(args.mask, model)
    targets: list[int | str] = [*args.target, *args.target_id]
    sweep_of = functools.partial(
        removal_sweep,
        model,
        args.prompt,
        target_tokens=targets,
        formatted=args.formatted,
        distributed=rank is not None,
    )
    if args.order == "random" or mask is None:  # every other order has a mask (checked above)
        order = random_order(model, seed=args.seed)
    else:
        order = mask.removal_order()
    if args.order == "influence":
        k = args.influence_k or len(order)
        first = sweep_of(order[:k], args.sweep.replace(max_new_tokens=0))
        order = influence_order(first, k=k) + order[k:]
    sweep = sweep_of(order, args.sweep, record_layers=args.reference_prompt is not None)
    reference = None
    if args.reference_prompt is not None:  # a forward pass: every rank runs it
        reference = layer_states(model, Setting(args.reference_prompt, formatted=args.formatted))
    if stage is None:  # ranks other than 0 have computed their share
        return 0
    write_csv(stage.path / "ranks.csv", sweep.ranks)
    write_csv(stage.path / "logits.csv", sweep.logits)
    write_csv(stage.path / "tokens.csv", sweep.tokens)
    write_csv(stage.path / "generations.csv", pd.DataFrame({"step": sweep.steps, "generation": sweep.generations}))
    figures = {"ranks": rank_figure(sweep), "logits": logit_figure(sweep), "generations": generation_table(sweep)}
    if reference is not None:
        table = sweep_similarity(sweep, reference)
        write_csv(stage.path / "sweep_similarity.csv", table)
        figures["sweep_similarity"] = sweep_similarity_figure(table)
    written = save_figures(stage.path, figures, args.png)
    summary = {
        "model": portable(args.model),
        "prompt": sweep.prompt,
        "order_kind": args.order,
        "order": sweep.order,
        "switch_step": sweep.switch_step,
        "change_step": sweep.change_step,
        "figures": file_names(written),
        "batch_size": sweep.metadata["batch_size"],
    }

    atomic_write_json(stage.path / "summary.json", summary)
    stage.commit()
    switch, change = step_or_never(sweep.switch_step), step_or_never(sweep.change_step)
    print(
        f"{len(sweep.steps)} steps; target top-1 {'never' if switch == 'never' else f'at step {switch}'}, "
        f"continuation changes {'never' if change == 'never' else f'at step {change}'}"
    )
    report(out, sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
    return 0
