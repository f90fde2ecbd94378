"""What the analysis commands (`sweep`, `lens`, `similarity`, `pathways`) share: loading the model and
a mask, writing tables (CSV) and figures (HTML with a shared plotly.min.js, PNG) into an output folder.

Heavy modules (torch, TransformerLens, pandas, plotly) are imported inside the helpers, so `--help`
answers at once."""

from __future__ import annotations

import sys
from pathlib import Path

from .._io import atomic_write_text
from ..options import Given, model_arguments
from ._registry import mask_file


def write_csv(path: Path, table, index: bool = False) -> Path:
    return atomic_write_text(path, table.to_csv(index=index))


def save_figures(out: Path, figures: dict, png: bool, files: list[str] | None = None) -> dict[str, str]:
    """Save figures (HTML beside one plotly.min.js, PNG); a PNG failure is one line on stderr.
    Returns each figure's main file; `files` receives the name of every file written."""
    # deferred: keeps --help free of torch, pandas and plotly
    from ..plots import save_figure

    written, errors = {}, set()
    for name, fig in figures.items():
        saved = save_figure(fig, out / name, png=png)
        written[name] = str(saved.png or saved.html)
        if files is not None:
            for path in (saved.html, saved.png, saved.plotly_js):
                if path is not None and path.is_file() and path.name not in files:
                    files.append(path.name)
        if png and saved.png_error:
            errors.add(saved.png_error)
    for error in sorted(errors):
        print(f"PNG figures not written (HTML written): {error}", file=sys.stderr)
    return written


def portable(name: str) -> str:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..models._fingerprint import portable_name

    return portable_name(name)


def file_names(written: dict[str, str]) -> dict[str, str]:
    """Figure files by name within the output folder: summaries hold no machine's absolute paths."""
    return {name: Path(path).name for name, path in written.items()}


def report(out: Path, files: list[str]) -> None:
    print(f"wrote to {out}: {', '.join(files)}")


def refuse_unused(args, given: Given, fields: tuple[str, ...], reason: str) -> None:
    """Options typed on the command line that the chosen mode does not use are refused, not ignored."""
    typed = [f"{given.typed[f]} {getattr(args, f)}" for f in fields if f in given]
    if typed:
        raise ValueError(f"{', '.join(typed)}: {reason}")


def load(args, **placement):
    """The model of the command's model options (`placement`: `device` and `shard` of a torchrun job)."""
    # deferred: keeps --help free of torch, pandas and plotly
    from ..models import load_model

    return load_model(args.model, **{**model_arguments(args), **placement})


def load_mask(path: str | None, model, option: str = "--mask"):
    if path is None:
        return None
    # deferred: keeps --help free of torch, pandas and plotly
    from ..masks import HeadMask

    return HeadMask.load(mask_file(path, option), model)
