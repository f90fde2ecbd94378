"""`headsup lens`: the logit lens, each layer's top tokens at the last position.

Heavy modules are imported inside the command, so `--help` answers at once."""

from __future__ import annotations

from dataclasses import dataclass

from .._io import OutputSet
from .._names import Gate
from .._validate import check_float
from ..options import FigureOptions, Given, ModelOptions, PromptOptions, check_counts
from ._outputs import load, load_mask, refuse_unused, report, save_figures, write_csv
from ._registry import check_out_dir, command, mask_file


@dataclass(frozen=True)
class LensCommand(FigureOptions, PromptOptions, ModelOptions):
    """Options of `headsup lens`."""

    out: str
    """Output folder: lens.csv and one heat map per stream."""
    mask: str | None = None
    """Optional mask file (or `headsup train` output folder) to gate the model with."""
    gate: Gate = "value"
    """Gate for the mask: value or query."""
    alpha: float = 0.0
    """Scale of heads outside the mask (value gate)."""
    k: int = 10
    """Top-k tokens per layer."""
    final_norm: bool = True
    """Apply the final norm before the unembedding; --no-final-norm reads the raw residual (the reference notebook)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, k=1)
        check_float("alpha", self.alpha, 0.0, 1.0)


def check_lens(args: LensCommand, given: Given) -> None:
    if args.mask is None:
        refuse_unused(
            args, given, ("gate", "alpha"), "they gate a mask, and no --mask is given (the run would be ungated)"
        )
    else:
        mask_file(args.mask)


@command("lens", LensCommand, check=check_lens)
def run_lens(args: LensCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..analysis import logit_lens
    from ..plots import logit_lens_figure

    out = check_out_dir(args.out)
    stage = OutputSet(out, "lens", option="--out", files=["lens.csv"])
    model = load(args)
    lens = logit_lens(
        model,
        args.prompt,
        args.k,
        load_mask(args.mask, model),
        gate=args.gate,
        alpha=args.alpha,
        formatted=args.formatted,
        final_norm=args.final_norm,
    )
    write_csv(stage.path / "lens.csv", lens.table)
    files = ["lens.csv"]
    save_figures(stage.path, {f"lens_{s}": logit_lens_figure(lens, s) for s in lens.probs}, args.png, files)
    stage.commit()
    last = lens.table[(lens.table.stream == "resid") & (lens.table["rank"] == 1)].token.tolist()
    print(f"top-1 per layer: {last}")
    report(out, files)
    return 0
