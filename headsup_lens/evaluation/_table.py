"""The comparison table's score columns, read from the outputs: for a fresh evaluation row by row
(`evaluate`), or again from stored outputs with no model run (`rescore`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..data import Task
from ._metrics import bleu, first_line, rouge_l
from ._scoring import Labels, mcnemar_exact, score_outputs, task_labels
from ._settings import REFERENCE_SETTINGS, setting_of
from ._translation_metrics import paper_bleu, paper_rouge_l, target_language_share

GENERATION_COLUMNS = ("task", "setting", "example", "input", "answer", "output")
"""The columns that identify an output in `Evaluation.generations`; the per-example scores follow."""
TEXT_COLUMNS = {"paper": ("rouge_l", "bleu"), "first_line": ("rouge_l_first_line", "sacrebleu_first_line")}
_LAST = ("balanced_accuracy", "predicted_labels")  # label-task columns close the score block


@dataclass
class Evaluation:
    """The paper's comparison table for one task and mask and every output behind it.

    `table`: one row per setting (columns: see `evaluate`). `generations`: one row per generated
    setting and example, `GENERATION_COLUMNS` and the per-example scores (`score_outputs`: correct,
    strict, echo, empty, and gold / predicted label on label tasks), so every number of the table
    can be read against its outputs; no rows when nothing was generated.
    """

    table: pd.DataFrame
    generations: pd.DataFrame


class RowScorer:
    """Scores the outputs of one task's settings, row after row: `score_outputs`, McNemar p-values
    of masked rows against the reference rows scored before them, and the text metrics chosen."""

    def __init__(
        self,
        task: Task,
        inputs: Sequence[str],
        answers: Sequence[str],
        labels: Labels | None,
        *,
        text_style: str | None,
        language_share: bool,
    ) -> None:
        self.task, self.inputs, self.answers, self.labels = task, list(inputs), list(answers), labels
        self.text_style, self.language_share = text_style, language_share
        self.references: dict[str, list[bool]] = {}

    def score(self, name: str, outputs: Sequence[str]) -> tuple[dict, dict[str, list]]:
        """(row columns, per-example columns) of one setting's outputs."""
        outputs = list(outputs)
        scores, per = score_outputs(self.task, outputs, self.inputs, self.answers, self.labels)
        setting = setting_of(name)
        for reference in REFERENCE_SETTINGS:  # paired tests on the same examples
            scores[f"p_vs_{reference}"] = (
                mcnemar_exact(per["correct"], self.references[reference])
                if setting is not None and setting.paired and reference in self.references
                else float("nan")
            )
        if name in REFERENCE_SETTINGS:
            self.references[name] = per["correct"]
        row = dict(sorted(scores.items(), key=lambda kv: kv[0] in _LAST))
        if self.text_style == "paper":
            row.update(rouge_l=paper_rouge_l(outputs, self.answers), bleu=paper_bleu(outputs, self.answers))
        elif self.text_style == "first_line":
            lines = [first_line(t) for t in outputs]
            row.update(
                rouge_l_first_line=rouge_l(lines, self.answers, char_level=self.task.char_level),
                sacrebleu_first_line=bleu(lines, self.answers, char_level=self.task.char_level),
            )
        if self.language_share and self.task.target_language is not None:
            row["target_language_share"] = target_language_share(outputs, self.task.target_language)
        return row, per


def generation_rows(
    task: str,
    setting: str,
    inputs: Sequence[str],
    answers: Sequence[str],
    outputs: Sequence[str],
    per: dict[str, list],
) -> pd.DataFrame:
    """One setting's rows of `Evaluation.generations`."""
    frame = pd.DataFrame(
        {"task": task, "setting": setting, "example": range(len(outputs)), "input": list(inputs)}
        | {"answer": list(answers), "output": list(outputs)}
    )
    return frame.assign(**per)


def concat_generations(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The settings' generation rows as one frame (the identifying columns only when there are none)."""
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(GENERATION_COLUMNS))


def _check_task(task: Task, table: pd.DataFrame, generations: pd.DataFrame) -> None:
    """Stored outputs are scored only against their own task (its name here, its pairs in `_check_pairs`)."""
    for what, frame in (("table", table), ("generations", generations)):
        if "task" in frame.columns and len(frame):
            names = sorted({str(name) for name in frame.task.tolist()})
            if names != [task.name]:
                raise ValueError(
                    f"the {what} holds outputs of task {', '.join(map(repr, names)) or 'none'}, not of task "
                    f"{task.name!r}: rescore them with the task they were generated for"
                )


def _check_pairs(task: Task, inputs: list[str], answers: list[str]) -> None:
    pairs = set(task.pairs)
    for example, pair in enumerate(zip(inputs, answers)):
        if pair not in pairs:
            raise ValueError(
                f"generations example {example} (input {pair[0]!r}, answer {pair[1]!r}) is not a pair of task "
                f"{task.name!r}: they were generated for other data (another version of the task?)"
            )


def _strings(frame: pd.DataFrame, column: str) -> list[str]:
    values = frame[column].tolist()
    bad = next((v for v in values if not isinstance(v, str)), None)
    if bad is not None:  # a number or NaN: the CSV was parsed into other types
        raise ValueError(
            f"generations column {column!r} holds {bad!r} ({type(bad).__name__}), not text: read the CSV with "
            f"dtype={{{column!r}: str}} and keep_default_na=False (an empty output stays empty)"
        )
    return values


def rescore(task: Task, table: pd.DataFrame, generations: pd.DataFrame) -> Evaluation:
    """The score columns of a comparison table recomputed from its stored outputs (no model run).

    `table` and `generations` are what `evaluate` wrote (`results.csv`, `generations.csv`), rows
    added by a script included: a row named `"<setting>, <label>"` (e.g. `"masked, seed 1"`) is
    scored as its registered setting (`setting_of`). Every row's accuracy, strict score, Wilson
    bounds, echo and empty counts, label columns, McNemar p-values against the reference rows and
    the text metrics the table has (`rouge_l`/`bleu`, the first-line pair, `target_language_share`)
    are recomputed; every other column (losses, heads kept, ...) is kept, and so are the table's
    columns and their order. The generations come back with their per-example scores recomputed.
    Read `generations.csv` with `dtype=str` for input, answer and output and `keep_default_na=False`.
    """
    missing = [c for c in GENERATION_COLUMNS if c not in generations.columns]
    if "setting" not in table.columns or missing:
        raise ValueError(
            f"rescore needs a table with a 'setting' column and generations with {list(GENERATION_COLUMNS)}"
        )
    _check_task(task, table, generations)
    settings = table.setting.tolist()
    repeated = sorted({s for s in settings if settings.count(s) > 1})
    if repeated:
        raise ValueError(f"the table names settings {repeated} more than once")
    unknown = sorted(set(generations.setting) - set(settings))
    if unknown:
        raise ValueError(f"generations of settings that the table does not have: {unknown}")
    sizes = table.n_examples.tolist() if "n_examples" in table.columns else [None] * len(settings)
    groups: dict[str, pd.DataFrame] = {}
    for name, size in zip(settings, sizes):
        group = generations.loc[generations.setting == name].sort_values(by="example", kind="mergesort")
        if group.empty:
            raise ValueError(f"the table's row {name!r} has no generations to score")
        n = int(size) if size is not None and not pd.isna(size) else len(group)
        if group.example.tolist() != list(range(n)):
            raise ValueError(f"generations of {name!r} are not examples 0..{n - 1} each once ({len(group)} rows)")
        groups[name] = group
    first = groups[settings[0]]
    inputs, answers = _strings(first, "input"), _strings(first, "answer")
    _check_pairs(task, inputs, answers)
    for name, group in groups.items():
        if _strings(group, "input") != inputs or _strings(group, "answer") != answers:
            raise ValueError(f"generations of {name!r} are not on the same examples as those of {settings[0]!r}")
    style = next((s for s, columns in TEXT_COLUMNS.items() if columns[0] in table.columns), None)
    scorer = RowScorer(
        task,
        inputs,
        answers,
        task_labels(task),
        text_style=style,
        language_share="target_language_share" in table.columns and task.is_translation,
    )
    # The reference rows first: a masked row listed before them is still paired with them.
    order = sorted(settings, key=lambda name: name not in REFERENCE_SETTINGS)
    scored = {name: scorer.score(name, _strings(groups[name], "output")) for name in order}
    rows = [{**record, **scored[record["setting"]][0]} for record in table.to_dict("records")]
    outputs = [
        groups[name][list(GENERATION_COLUMNS)].reset_index(drop=True).assign(**scored[name][1]) for name in settings
    ]
    return Evaluation(
        table=pd.DataFrame(rows, columns=list(table.columns)), generations=pd.concat(outputs, ignore_index=True)
    )
