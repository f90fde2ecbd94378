"""`headsup tasks`: which task names exist, how big they are, and which need the data directory.

Answers in about a second: no torch, TransformerLens or pandas, and the data directory's files are
read only for the tasks shown with sizes (`--sizes`, or a `--match` that picks a few).
The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from ..data import data_dir as resolve_data_dir
from ..data import load_task, task_names
from ..options import DataOptions, Given
from ._registry import command

# A --match that picks at most this many tasks shows their sizes without --sizes.
SIZES_UP_TO = 12


# The paper's XNLI 15-way file is not available: translation pairs come from the XTREME dev+test files.
XNLI_NOTE = "XNLI dev+test (XTREME), not the paper's 15-way file"


@dataclass(frozen=True)
class TasksCommand(DataOptions):
    """Options of `headsup tasks`."""

    match: str | None = None
    """Only names containing this text (e.g. `organism`, `translation`)."""
    sizes: bool = False
    """Also count the examples of every data-directory task (reads all their files: ~10-20 s for all of them)."""


def task_rows(match: str | None = None, data_dir: str | None = None, sizes: bool | None = None) -> list[dict]:
    """One row per task: name, source (built in / data directory), train and held-out examples
    (None where not counted), note. `sizes` counts data-directory tasks too (default: only when at
    most `SIZES_UP_TO` tasks are shown)."""
    names = [name for name in task_names() if not match or match in name]
    if sizes is None:
        sizes = len(names) <= SIZES_UP_TO
    rows = []
    with tempfile.TemporaryDirectory() as empty:
        for name in names:
            row = {"task": name, "source": "built in", "train": None, "held out": None, "note": ""}
            try:
                task = load_task(name, empty)  # loads from an empty folder: needs no data directory
            except (ValueError, OSError):
                row["source"], task = "data directory", None
                if sizes:
                    try:
                        task = load_task(name, data_dir)
                    except (ValueError, OSError) as error:
                        row["note"] = "not found" if "does not exist" in str(error) else str(error).split(";")[0]
            if task is not None:
                row["train"], row["held out"] = task.n_train, len(task.eval_pairs)
            if name.startswith("translation/") and not row["note"]:
                row["note"] = XNLI_NOTE
            rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    """A plain text table; uncounted sizes are blank."""
    columns = ["task", "source", "train", "held out", "note"]
    cells = [[("" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    align = [str.ljust, str.ljust, str.rjust, str.rjust, str.ljust]
    lines = ["  ".join(a(c, w) for a, c, w in zip(align, columns, widths))]
    lines += ["  ".join(a(v, w) for a, v, w in zip(align, r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


@command("tasks", TasksCommand)
def run_tasks(args: TasksCommand, given: Given) -> int:
    rows = task_rows(args.match, args.data_dir, True if args.sizes else None)
    if not rows:
        from ..data._registry import suggest_tasks  # no torch: the names only

        close = suggest_tasks(args.match or "")
        hint = f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""
        raise ValueError(f"no task name contains {args.match!r}{hint} (`headsup tasks` lists them all)")
    print(format_rows(rows))
    try:
        where = f"data directory: {resolve_data_dir(args.data_dir)}"
    except ValueError:
        where = "data directory: not found (fetch it with `headsup download-data`, or pass --data-dir)"
    built_in = sum(row["source"] == "built in" for row in rows)
    print(f"\n{len(rows)} tasks, {built_in} built in (no data needed); {where}")
    if any(row["source"] == "data directory" and row["train"] is None and not row["note"] for row in rows):
        print(
            "sizes of data-directory tasks: add --sizes (reads every file), or narrow with --match; "
            "your own task: --task my_task.json|.jsonl|.csv (input/output pairs) in train, evaluate and demo"
        )
    if any(row["note"] == XNLI_NOTE for row in rows):
        print(
            "translation/*: each distinct premise or hypothesis of the XNLI 1.0 dev (2 490 rows) and test "
            "(5 010 rows) files gives one pair, dev first (about 10 000 pairs: 9 999 from English); the last "
            "100 are held out. The paper used the 15-way XNLI file (10 000 sentences, an order not known "
            "here), so the training and held-out sentences differ from the paper's."
        )
    return 0
