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


TABLE_WIDTH = 100  # a printed table fits a terminal of this many columns; the CSV keeps every column


def compact_table(table, columns: list[str] | None = None, *, width: int = TABLE_WIDTH, full: str = "") -> str:
    """`table` as text that people read: the `columns` present (default: all, in order), numbers to
    3 significant digits, whole numbers as integers (`270`, not `270.0`), a missing value as `-`;
    the last columns are left out until the lines fit `width` characters, and named in a last line
    that says where the full table is (`full`, e.g. "results.csv")."""
    import math  # deferred with pandas: keeps --help light

    def cell(value) -> str:
        if isinstance(value, bool) or value is None:
            return "-" if value is None else str(value)
        if isinstance(value, float):
            if math.isnan(value):
                return "-"
            if value.is_integer() and abs(value) < 1e6:
                return str(int(value))
            return f"{value:.3g}"
        return " ".join(str(value).split())

    shown = [c for c in (columns if columns is not None else list(table.columns)) if c in table.columns]
    text = {c: [cell(v) for v in table[c].tolist()] for c in shown}
    left_out: list[str] = []
    while True:
        widths = {c: max([len(c), *map(len, text[c])]) for c in shown}
        numeric = {c: all(v == "-" or _is_number(v) for v in text[c]) for c in shown}

        def line(values: dict) -> str:
            return "  ".join(values[c].rjust(widths[c]) if numeric[c] else values[c].ljust(widths[c]) for c in shown)

        lines = [line({c: c for c in shown})] + [line({c: text[c][i] for c in shown}) for i in range(len(table))]
        if len(shown) <= 1 or max(len(x.rstrip()) for x in lines) <= width:
            break
        left_out.insert(0, shown.pop())
    lines = [x.rstrip() for x in lines]
    if left_out or (columns is not None and len(shown) < len(table.columns)):
        rest = [c for c in table.columns if c not in shown]
        note = f"({len(rest)} more columns{f' in {full}' if full else ''}: {', '.join(rest)})"
        lines.append(note if len(note) <= width else note[: width - 4] + "...)")
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def refuse_unused(args, given: Given, fields: tuple[str, ...], reason: str) -> None:
    """Options typed on the command line that the chosen mode does not use are refused, not ignored."""

    def value(path: str):  # a nested config's field: `lens.gate`
        obj = args
        for name in path.split("."):
            obj = getattr(obj, name)
        return obj

    typed = [f"{given.typed[f]} {value(f)}" for f in fields if f in given]
    if typed:
        raise ValueError(f"{', '.join(typed)}: {reason}")


def check_gated_mask(args, given: Given, config: str, without: str) -> None:
    """--mask names a mask file; without one, the gate options of the nested `config` are refused
    (`without`: what the run would be)."""
    if args.mask is None:
        fields = (f"{config}.gate", f"{config}.alpha")
        refuse_unused(args, given, fields, f"they gate a mask, and no --mask is given ({without})")
    else:
        mask_file(args.mask)


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
