"""`headsup lens`: the logit lens, each layer's top tokens at the last position.

Heavy modules are imported inside the command, so `--help` answers at once."""

from __future__ import annotations

from dataclasses import dataclass

from .._io import OutputSet
from ..analysis._config import LensConfig
from ..options import FigureOptions, Given, ModelOptions, PromptOptions, option
from ._outputs import check_gated_mask, load, load_mask, report, save_figures, write_csv
from ._registry import check_out_dir, command


@dataclass(frozen=True)
class LensCommand(FigureOptions, PromptOptions, ModelOptions):
    """Options of `headsup lens`."""

    out: str
    """Output folder: lens.csv and one heat map per stream."""
    mask: str | None = None
    """Optional mask file (or `headsup train` output folder) to gate the model with."""
    lens: LensConfig = option(default_factory=LensConfig, group="Lens")
    """What each layer is read for (`logit_lens`'s config)."""


def check_lens(args: LensCommand, given: Given) -> None:
    check_gated_mask(args, given, "lens", "the run would be ungated")


@command("lens", LensCommand, check=check_lens)
def run_lens(args: LensCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..analysis import logit_lens
    from ..plots import logit_lens_figure

    out = check_out_dir(args.out)
    stage = OutputSet(out, "lens", option="--out", files=["lens.csv"])
    model = load(args)
    lens = logit_lens(model, args.prompt, None, load_mask(args.mask, model), args.lens, formatted=args.formatted)
    write_csv(stage.path / "lens.csv", lens.table)
    files = ["lens.csv"]
    save_figures(stage.path, {f"lens_{s}": logit_lens_figure(lens, s) for s in lens.probs}, args.png, files)
    stage.commit()
    last = lens.table[(lens.table.stream == "resid") & (lens.table["rank"] == 1)].token.tolist()
    print(f"top-1 per layer: {last}")
    report(out, files)
    return 0
