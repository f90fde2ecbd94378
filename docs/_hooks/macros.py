"""Numbers and tables of the results pages, read from the committed CSVs while the site is built.

A results page (front matter `render_macros: true`) writes no result by hand: a table is
`{{ table("figures/…/x.csv", columns=…) }}`, a number in a sentence is
`{{ value("figures/…/x.csv", "accuracy", task="antonym", setting="masked") }}` (exactly one row must
match), a count over the rows is `{{ count("…generations.csv", setting="masked", output__startswith="…") }}`.
Filters are `column=value` (equality) or `column__op=value` with the operations in `OPERATIONS`; a
column name that is not a Python identifier goes into `where={"name": value}`. A filter that
matches no row, a missing file or column is an error, so the build fails instead of printing a stale
number. `hand_typed_numbers` lists the digits a page states outside these calls (tests/docs).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import string
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
PLOTLY_JS = "plotly.min.js"
ASSETS = "assets"  # the site folder that receives figures/plotly.min.js (docs/_hooks/site.py)

OPERATIONS = {
    "eq": lambda s, v: s == v,
    "ne": lambda s, v: s != v,
    "lt": lambda s, v: s < v,
    "le": lambda s, v: s <= v,
    "gt": lambda s, v: s > v,
    "ge": lambda s, v: s >= v,
    "in": lambda s, v: s.isin(list(v)),
    "notin": lambda s, v: ~s.isin(list(v)),
    "isna": lambda s, v: s.isna() if v else s.notna(),
    "startswith": lambda s, v: s.astype(str).str.startswith(v),
    "endswith": lambda s, v: s.astype(str).str.endswith(v),
    "contains": lambda s, v: s.astype(str).str.contains(v, regex=False),
    "icontains": lambda s, v: s.astype(str).str.lower().str.contains(str(v).lower(), regex=False),
    "regex": lambda s, v: s.astype(str).str.contains(v, regex=True),
    "iregex": lambda s, v: s.astype(str).str.contains(v, regex=True, case=False),
    "fullmatch": lambda s, v: s.astype(str).str.fullmatch(v),
}
# Operations against another column of the same row: `output__icontains_col="answer"`.
ROW_OPERATIONS = {
    "eq_col": lambda a, b: a == b,
    "ne_col": lambda a, b: a != b,
    "contains_col": lambda a, b: str(b) in str(a),
    "icontains_col": lambda a, b: str(b).lower() in str(a).lower(),
    "startswith_col": lambda a, b: str(a).startswith(str(b)),
}


class DataError(ValueError):
    """A reference to the data that does not resolve (missing file, column, or not one matching row)."""


# ---------------------------------------------------------------------------------------------- reading
@cache
def _read(path: str) -> pd.DataFrame:
    file = ROOT / path
    if not file.is_file() and (ROOT / f"{path}.gz").is_file():  # long tables are committed gzipped
        file = ROOT / f"{path}.gz"
    if not file.is_file():
        raise DataError(f"{path}: no such file (paths are relative to the repository root)")
    # Empty cells stay NaN; text such as "n/a" or "None" stays text.
    return pd.read_csv(file, keep_default_na=False, na_values=[""])


def frame(path: str, where: dict | None = None, query: str | None = None, **filters: Any) -> pd.DataFrame:
    """The rows of the CSV at `path` (relative to the repository root) that pass every filter, and
    `query` (a pandas expression over the columns, for conditions the filters cannot say)."""
    data = _read(path)
    conditions = {**(where or {}), **filters}
    queries = [q for q in (query, conditions.pop("query", None)) if q is not None]
    for text in queries:
        data = data[data.eval(text, engine="python").astype(bool)]
    mask = pd.Series(True, index=data.index)
    for key, wanted in conditions.items():
        column, _, operation = key.partition("__") if key not in data.columns else (key, "", "")
        operation = operation or "eq"
        if column not in data.columns:
            raise DataError(f"{path}: no column {column!r} (columns: {', '.join(map(str, data.columns))})")
        if operation in ROW_OPERATIONS:
            if wanted not in data.columns:
                raise DataError(f"{path}: no column {wanted!r} to compare {column!r} with")
            test = ROW_OPERATIONS[operation]
            mask &= pd.Series([bool(test(a, b)) for a, b in zip(data[column], data[wanted])], index=data.index)
            continue
        if operation not in OPERATIONS:
            known = ", ".join([*OPERATIONS, *ROW_OPERATIONS])
            raise DataError(f"{path}: unknown filter {key!r} (operations: {known})")
        mask &= OPERATIONS[operation](data[column], wanted).fillna(False).astype(bool)
    return data[mask]


def _one(path: str, where: dict | None, filters: dict) -> pd.Series:
    rows = frame(path, where, **filters)  # `query=` travels in `filters`
    if len(rows) != 1:
        shown = {**(where or {}), **filters}
        raise DataError(f"{path}: {len(rows)} rows match {shown}, expected exactly one")
    return rows.iloc[0]


def num(path: str, column: str, where: dict | None = None, **filters: Any) -> Any:
    """The raw value of `column` in the one row that matches (for arithmetic in a page)."""
    row = _one(path, where, filters)
    if column not in row.index:
        raise DataError(f"{path}: no column {column!r}")
    value = row[column]
    return value.item() if hasattr(value, "item") else value


def value(path: str, column: str, fmt: str = ".2f", where: dict | None = None, **filters: Any) -> str:
    """`column` of the one row that matches, formatted with `fmt` (see `format_number`)."""
    return format_number(num(path, column, where, **filters), fmt)


def csv(path: str, column: str, fmt: str = ".2f", where: dict | None = None, **filters: Any) -> str:
    """The same as `value(path, column, ...)`, with the column named by keyword as well."""
    return value(path, column, fmt, where, **filters)


def count(path: str, where: dict | None = None, **filters: Any) -> int:
    """How many rows pass the filters."""
    return len(frame(path, where, **filters))


def agg(path: str, column: str, how: str = "mean", fmt: str = ".2f", where: dict | None = None, **filters: Any) -> str:
    """`how` (mean, median, min, max, sum, std, nunique) of `column` over the matching rows, formatted."""
    rows = frame(path, where, **filters)
    if rows.empty:
        raise DataError(f"{path}: no rows match { ({**(where or {}), **filters}) }")
    if column not in rows.columns:
        raise DataError(f"{path}: no column {column!r}")
    if how not in ("mean", "median", "min", "max", "sum", "std", "nunique"):
        raise DataError(f"unknown aggregate {how!r}")
    result = getattr(rows[column], how)()
    return format_number(result.item() if hasattr(result, "item") else result, fmt)


def json_value(path: str, *keys: str | int, fmt: str = "") -> str:
    """A value inside the JSON file at `path`, e.g. `json_value("…/train_config.json", "steps")`."""
    file = ROOT / path
    if not file.is_file() and (ROOT / f"{path}.gz").is_file():  # long tables are committed gzipped
        file = ROOT / f"{path}.gz"
    if not file.is_file():
        raise DataError(f"{path}: no such file")
    data: Any = json.loads(file.read_text(encoding="utf-8"))
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError) as error:
            raise DataError(f"{path}: no entry {key!r}") from error
    return format_number(data, fmt)


def cell_json(path: str, column: str, key: str, fmt: str = "d", where: dict | None = None, **filters: Any) -> str:
    """An entry of a JSON cell (e.g. `predicted_labels`' count of one label) in the one matching row;
    a key the cell does not hold counts 0."""
    cell = num(path, column, where, **filters)
    data = json.loads(cell) if isinstance(cell, str) else {}
    return format_number(data.get(key, 0), fmt)


def top_label(path: str, column: str = "predicted_labels", where: dict | None = None, **filters: Any) -> str:
    """The most frequent key of a JSON count cell (e.g. the label a row predicts most often)."""
    cell = num(path, column, where, **filters)
    data = json.loads(cell) if isinstance(cell, str) else {}
    if not data:
        raise DataError(f"{path}: {column} is empty in the matching row")
    return str(max(data, key=data.get))


def n_where(
    path: str,
    column: str,
    a: Any,
    b: Any,
    op: str = ">",
    group: str = "task",
    key: str = "setting",
    mean: bool = False,
    where: dict | None = None,
    **filters: Any,
) -> int:
    """In how many groups (e.g. tasks) the row `key=a` has a larger (`op`) `column` than the row `key=b`;
    `mean=True` first averages the rows of each (group, key) (e.g. over examples)."""
    data = frame(path, where, **filters)
    if mean:
        data = data.groupby([group, key], sort=False, as_index=False)[column].mean()
    compare = {">": lambda x, y: x > y, "<": lambda x, y: x < y, ">=": lambda x, y: x >= y, "<=": lambda x, y: x <= y}
    if op not in compare:
        raise DataError(f"unknown comparison {op!r}")
    n = 0
    for _, rows in data.groupby(group, sort=False):
        left, right = rows[rows[key] == a], rows[rows[key] == b]
        if len(left) == 1 and len(right) == 1:
            n += bool(compare[op](left[column].iloc[0], right[column].iloc[0]))
    return n


def n_groups(path: str, group: str = "task", where: dict | None = None, **filters: Any) -> int:
    """How many distinct values `group` takes among the matching rows."""
    data = frame(path, where, **filters)
    if group not in data.columns:
        raise DataError(f"{path}: no column {group!r}")
    return int(data[group].nunique())


def share(path: str, within: dict, fmt: str = ".2f", **filters: Any) -> str:
    """The share of the rows matching `within` that also pass `filters` (e.g. outputs that contain the
    answer among one setting's outputs)."""
    base = frame(path, within)
    if base.empty:
        raise DataError(f"{path}: no rows match {within}")
    return format_number(len(frame(path, {**within, **filters})) / len(base), fmt)


def first(path: str, column_: str, fmt: str = "", where: dict | None = None, **filters: Any) -> str:
    """`column_` of the first matching row in the file's order (e.g. the first step that reaches a rank)."""
    data = frame(path, where, **filters)
    if data.empty:
        raise DataError(f"{path}: no rows match { ({**(where or {}), **filters}) }")
    if column_ not in data.columns:
        raise DataError(f"{path}: no column {column_!r}")
    value_ = data[column_].iloc[0]
    return format_number(value_.item() if hasattr(value_, "item") else value_, fmt)


def json_num(path: str, *keys: str | int) -> Any:
    """The raw value inside a JSON file (for arithmetic in a page)."""
    file = ROOT / path
    if not file.is_file() and (ROOT / f"{path}.gz").is_file():  # long tables are committed gzipped
        file = ROOT / f"{path}.gz"
    if not file.is_file():
        raise DataError(f"{path}: no such file")
    data: Any = json.loads(file.read_text(encoding="utf-8"))
    for key in keys:
        data = data[key]
    return data


def paired(
    path_a: str,
    a: dict,
    path_b: str | None = None,
    b: dict | None = None,
    column: str = "correct",
    pair: str = "example",
    compare: str | None = None,
) -> dict:
    """Two scorings of the same examples, paired by `pair`: how many only `a` gets right (`only_a`),
    only `b`, both, and the exact McNemar p-value (`p`); with `compare`, how many examples differ
    in that column (`changed`, e.g. the generations of two checkpoints)."""
    from headsup_lens.evaluation import mcnemar_exact

    left = frame(path_a, a).set_index(pair)
    right = frame(path_b or path_a, b or {}).set_index(pair)
    if left.index.duplicated().any() or right.index.duplicated().any():
        raise DataError(f"{path_a}: {pair!r} does not identify the examples")
    common = left.index.intersection(right.index)
    if len(common) != len(left) or len(common) != len(right):
        raise DataError(f"{path_a}: the two scorings cover different examples")
    x, y = left.loc[common, column].astype(bool), right.loc[common, column].astype(bool)
    result = {
        "n": len(common),
        "only_a": int((x & ~y).sum()),
        "only_b": int((~x & y).sum()),
        "both": int((x & y).sum()),
        "p": float(mcnemar_exact(x.tolist(), y.tolist())),
    }
    if compare is not None:
        result["changed"] = int((left.loc[common, compare] != right.loc[common, compare]).sum())
    return result


def label_stats(
    path: str, output: str = "output", answer: str = "answer", where: dict | None = None, **filters: Any
) -> dict:
    """For a label task's outputs: the predicted label of each (the label named first, as `evaluate`
    reads it), their `counts`, the `balanced_accuracy` and per-label `hits` and `n` (recall)."""
    from headsup_lens.evaluation import Labels, balanced_accuracy

    data = frame(path, where, **filters)
    labels = Labels("answer", tuple(sorted(set(_read(path)[answer].astype(str)))))
    predicted = [labels.predicted(str(o), "") for o in data[output]]
    gold = data[answer].astype(str).tolist()
    counts: dict[str, int] = {}
    for label in predicted:
        counts[label] = counts.get(label, 0) + 1
    hits = {g: sum(1 for gg, pp in zip(gold, predicted) if gg == g and pp == g) for g in set(gold)}
    return {
        "counts": counts,
        "balanced_accuracy": balanced_accuracy(gold, predicted),
        "hits": hits,
        "n": {g: gold.count(g) for g in set(gold)},
    }


def mask_diff(path_a: str, path_b: str) -> dict:
    """Two stored masks of one model: heads kept by each, and how many `a` keeps that `b` removes
    (`out`) and the other way round (`in`)."""
    from safetensors import safe_open

    def kept(path: str):
        file = ROOT / path
        if not file.is_file():
            raise DataError(f"{path}: no such mask file")
        with safe_open(str(file), "np") as handle:
            return handle.get_tensor("values") > 0

    x, y = kept(path_a), kept(path_b)
    return {"kept_a": int(x.sum()), "kept_b": int(y.sum()), "out": int((x & ~y).sum()), "in": int((~x & y).sum())}


def rows(path: str, where: dict | None = None, **filters: Any) -> list[dict]:
    """The matching rows as dicts (for loops and `|min`, `|max`, `|median` in a page)."""
    return frame(path, where, **filters).to_dict("records")


def column(path: str, name: str, where: dict | None = None, **filters: Any) -> list:
    """One column of the matching rows, as a list."""
    data = frame(path, where, **filters)
    if name not in data.columns:
        raise DataError(f"{path}: no column {name!r}")
    return data[name].tolist()


def argmin_by(path: str, column_: str, at: str, group: str = "task", where: dict | None = None, **filters: Any) -> list:
    """Per group, the value of `at` where `column_` is smallest (e.g. the α of the lowest loss per task)."""
    data = frame(path, where, **filters)
    return [rows_.loc[rows_[column_].idxmin(), at] for _, rows_ in data.groupby(group, sort=False)]


def median(values: list) -> float:
    """The median of a list of numbers."""
    return float(pd.Series(list(values), dtype=float).median())


def influence_reorder(weight: str, influence: str, k: int, target: str | None = None) -> dict:
    """What the influence order (App. C.3.1) did to a weight-order removal sweep, from the two sweeps'
    rank CSVs (one row per step and tracked token: `step`, `label`, `rank`, `kind`).

    The influence order is recomputed from the weight sweep's target ranks with the library's own
    `analysis.influence_order` (the heads stand for their weight-order steps). Returns `k`;
    `rises` (the target's rank rise at each weight-order removal up to the switch, step 1 first);
    `start_rank` (before any removal); `switch_weight` / `switch_influence` (removals until the
    target is the top token); `first_rank` (the target's rank after the first influence removal);
    `steps` (the weight-order step of each influence removal, up to the influence switch); `n_zero`
    / `n_negative` (removals among the first k whose rise is zero / negative) and `n_zero_after`
    (of the zero ones, those after the weight switch); `all_removed` (influence removals until every
    head of the weight order's first `switch_weight` is removed) and `n_after_switch_before`
    (influence removals before that point that the weight order makes after its switch);
    `n_first_by_switch` (how many of the weight order's first `switch_weight` heads the influence
    order has removed when its own switch comes).
    """
    from headsup_lens.analysis import RemovalSweep, influence_order

    sweeps = {}
    for name, path in (("weight", weight), ("influence", influence)):
        data = frame(path, kind="target")
        label = target if target is not None else str(data["label"].iloc[0])
        ranks = data.loc[data["label"] == label].sort_values(by="step")
        if ranks.empty:
            raise DataError(f"{path}: no target {label!r}")
        sweeps[name] = ranks[["step", "rank"]].rename(columns={"rank": label}).reset_index(drop=True)
    ranks_w, ranks_i = sweeps["weight"], sweeps["influence"]
    label = ranks_w.columns[1]
    n = len(ranks_w) - 1
    k = min(int(k), n)
    sweep = RemovalSweep(
        prompt="",
        order=[(0, i) for i in range(n)],
        steps=ranks_w["step"].astype(int).tolist(),
        tokens=pd.DataFrame({"label": [label], "kind": ["target"]}),
        ranks=ranks_w,
        logits=ranks_w,
        generations=[],
        generation_ids=[],
    )
    order = [head for _, head in influence_order(sweep, k=k)]  # weight-order positions, 0-based
    w = ranks_w[label].astype(int).to_numpy()
    rise = w[:-1] - w[1:]
    hits_w, hits_i = (w == 1).nonzero()[0], (ranks_i[label].to_numpy() == 1).nonzero()[0]
    if not len(hits_w) or not len(hits_i):
        raise DataError(f"{weight} / {influence}: the target never becomes the top token")
    switch_w, switch_i = int(hits_w[0]), int(hits_i[0])
    needed = set(range(switch_w))
    all_removed = max(order.index(i) for i in needed) + 1
    return {
        "k": k,
        "rises": [int(r) for r in rise[:switch_w]],
        "start_rank": int(w[0]),
        "switch_weight": switch_w,
        "switch_influence": switch_i,
        "first_rank": int(ranks_i[label].iloc[1]),
        "steps": [i + 1 for i in order[:switch_i]],
        "n_zero": int((rise[:k] == 0).sum()),
        "n_negative": int((rise[:k] < 0).sum()),
        "n_zero_after": int((rise[switch_w:k] == 0).sum()),
        "all_removed": all_removed,
        "n_after_switch_before": sum(1 for i in order[:all_removed] if i >= switch_w),
        "n_first_by_switch": sum(1 for i in order[:switch_i] if i < switch_w),
    }


# ---------------------------------------------------------------------------------------------- formatting
def format_number(x: Any, fmt: str = ".2f") -> str:
    """`x` with Python's format spec `fmt`; a `,` in the spec groups thousands with a space ("6 250"),
    `%` prints a share as a percentage ("98%"), exponents lose their padding ("2e-5"), an empty spec
    prints the value as stored. NaN -> "n/a"."""
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    if isinstance(x, bool) or not fmt:
        return str(x)
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            return x
    if fmt.endswith("d") and isinstance(x, float) and x.is_integer():
        x = int(x)
    text = format(x, fmt)
    text = re.sub(
        r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text
    )  # 2e-05 -> 2e-5
    return text.replace(",", " ") if "," in fmt else text


def _cell(row: pd.Series, template: str, na: str) -> str:
    """One table cell: a column name, or a format template such as "{accuracy:.2f} / {strict:.2f}"."""
    if "{" not in template:
        template = "{" + template + "}"
    names = re.findall(r"\{([^{}:!]+)", template)
    missing = [n for n in names if n not in row.index]
    if missing:
        raise DataError(f"no column {missing[0]!r} (columns: {', '.join(map(str, row.index))})")
    values = {n: row[n] for n in names}
    if any(isinstance(v, float) and math.isnan(v) for v in values.values()):
        return na
    pieces = []
    for literal, field, spec, _ in string.Formatter().parse(template):
        pieces.append(literal)
        if field is not None:
            pieces.append(format_number(values[field], spec or "") if spec else str(values[field]))
    return "".join(pieces).replace("|", "\\|").replace("\n", " ")


def _columns(columns: dict | list | None, data: pd.DataFrame) -> list[tuple[str, str]]:
    if columns is None:
        return [(str(c), str(c)) for c in data.columns]
    if isinstance(columns, dict):
        return [(str(k), str(v)) for k, v in columns.items()]
    return [(str(c), str(c)) if isinstance(c, str) else (str(c[0]), str(c[1])) for c in columns]


def markdown_table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def table(
    path: str,
    columns: dict | list | None = None,
    where: dict | None = None,
    sort: str | list | None = None,
    descending: bool = False,
    order: dict | None = None,
    na: str = "n/a",
    **filters: Any,
) -> str:
    """A Markdown table of the matching rows: `columns` maps a header to a column name or a template
    ("{accuracy:.2f} [{accuracy_low:.2f}, {accuracy_high:.2f}]"); `order={"column": [values...]}`
    keeps the rows in that order of a column's values (the file's order otherwise)."""
    data = frame(path, where, **filters)
    if data.empty:
        raise DataError(f"{path}: no rows match { ({**(where or {}), **filters}) }")
    if order:
        (column, values), *_ = order.items()
        rank = {v: i for i, v in enumerate(values)}
        data = data[data[column].isin(values)]
        data = data.iloc[sorted(range(len(data)), key=lambda i: rank[data[column].iloc[i]])]
    if sort is not None:
        data = data.sort_values(sort, ascending=not descending, kind="stable")
    spec = _columns(columns, data)
    rows = [[_cell(row, template, na) for _, template in spec] for _, row in data.iterrows()]
    return markdown_table([label for label, _ in spec], rows)


def group_table(
    path: str,
    by: str,
    columns: dict,
    how: str = "mean",
    sort: str | None = None,
    descending: bool = True,
    where: dict | None = None,
    **filters: Any,
) -> str:
    """One row per value of `by`, each column the `how` (mean, median, min, max, sum) of a column over
    the group's rows: `columns` maps a header to "column" or "column:format" (e.g. "auroc:.2f")."""
    data = frame(path, where, **filters)
    if how not in ("mean", "median", "min", "max", "sum"):
        raise DataError(f"unknown aggregate {how!r}")
    specs = {label: [*spec.split(":", 1), ".2f"][:2] for label, spec in columns.items()}
    for name, _ in specs.values():
        if name not in data.columns:
            raise DataError(f"{path}: no column {name!r}")
    grouped = data.groupby(by, sort=False)[[name for name, _ in specs.values()]].agg(how)
    if sort is not None:
        grouped = grouped.sort_values(sort, ascending=not descending, kind="stable")
    body = [
        [str(key)] + [format_number(row[name], fmt) for name, fmt in specs.values()] for key, row in grouped.iterrows()
    ]
    return markdown_table([by, *specs], body)


def pivot(
    path: str,
    index: str,
    columns: str,
    cell: str,
    rows: list | None = None,
    cols: list | None = None,
    labels: dict | None = None,
    index_label: str | None = None,
    na: str = "",
    where: dict | None = None,
    **filters: Any,
) -> str:
    """A table with one row per value of `index` and one column per value of `columns`, each cell
    rendered from `cell` (a template, as in `table`). `rows`/`cols` choose and order the values;
    `labels` renames a column header; a missing combination is `na`."""
    data = frame(path, where, **filters)
    rows = rows if rows is not None else list(dict.fromkeys(data[index]))
    cols = cols if cols is not None else list(dict.fromkeys(data[columns]))
    labels = labels or {}
    body = []
    for r in rows:
        line = [str(labels.get(r, r))]
        for c in cols:
            match = data[(data[index] == r) & (data[columns] == c)]
            if len(match) > 1:
                raise DataError(f"{path}: {len(match)} rows for {index}={r!r}, {columns}={c!r}")
            line.append(na if match.empty else _cell(match.iloc[0], cell, na))
        body.append(line)
    header = [index_label or index] + [str(labels.get(c, c)) for c in cols]
    return markdown_table(header, body)


# ---------------------------------------------------------------------------------------------- figures
def relative_root(page_url: str) -> str:
    """The path from a page (its URL, e.g. "results/smollm2/") to the site root."""
    depth = page_url.strip("/").count("/") + 1 if page_url.strip("/") else 0
    if page_url and not page_url.endswith("/"):  # "x.html"-style URLs sit in their folder
        depth -= 1
    return "../" * depth or "./"


def plotly_figure(path: str, page_url: str = "", height: int | None = None) -> str:
    """The plot of a committed HTML figure (its `<div>` and `Plotly.newPlot` script), loading the one
    plotly.js the site serves from `assets/`. Nothing is fetched from the internet."""
    file = ROOT / path
    if not file.is_file() and (ROOT / f"{path}.gz").is_file():  # long tables are committed gzipped
        file = ROOT / f"{path}.gz"
    if not file.is_file():
        raise DataError(f"{path}: no such figure")
    page = file.read_text(encoding="utf-8")
    body = re.search(r"<body>(.*)</body>", page, flags=re.S)
    if body is None:
        raise DataError(f"{path}: not a plotly HTML figure")
    inner = re.sub(r'<script[^>]*\ssrc="[^"]*"[^>]*>\s*</script>', "", body.group(1))
    inner = re.sub(r"<script>window\.PlotlyConfig[^<]*</script>", "", inner)
    if height is not None:
        inner = re.sub(r'^(\s*<div style=")height:\d+px;', rf"\1height:{height}px;", inner, count=1)
    script = f'<script src="{relative_root(page_url)}{ASSETS}/{PLOTLY_JS}"></script>'
    # No indented or blank line: Markdown would read the first as code and end the HTML block at the second.
    inner = "\n".join(line.strip() for line in inner.splitlines() if line.strip())
    return f'<div class="plotly-figure" title="{html.escape(path)}">{script}\n{inner}\n</div>'


# ---------------------------------------------------------------------------------------------- checking pages
_SKIPPED = [
    r"\A---\n.*?\n---\n",  # front matter
    r"\{%-?\s*macro\b.*?\{%-?\s*endmacro\s*-?%\}",  # a page's own macros are code, not prose
    r"^(?P<fence>```|~~~).*?^(?P=fence)",  # fenced code
    r"\{\{.*?\}\}",  # macro calls
    r"\{%.*?%\}",
    r"\{#.*?#\}",
    r"<!--.*?-->",
    r"`[^`\n]*`",  # inline code: file names, commands and their options
    r"\]\([^)]*\)",  # link targets
    r"<[^>\n]*>",  # HTML tags
    r'"[^"\n]*"',  # quoted model outputs and names ("Sony's PlayStation 3")
    r"^\s*\d+\.\s",  # numbered list items
]
# Names that contain digits but state no result: the paper's artifacts, models, datasets, seeds.
IDENTIFIERS = [
    r"\b(?:Tables?|Figs?\.|Figures?|App\.|Appendix|Eq\.|Sections?|§|[Cc]laims?)\s*[A-Z]?\.?\d+(?:\.\d+)*"
    r"(?:\s*(?:/|,|and|or|–|-)\s*[A-Z]?\d+(?:\.\d+)*)*",
    r"\bSmolLM2(?:-135M(?:-Instruct)?)?",
    r"\bLlama-?3(?:\.1)?(?:-8B)?(?:-Instruct)?",
    r"\bQwen2(?:\.5)?(?:-0\.5B)?",
    r"\bGemma-3(?:-270M)?",
    r"\b(?:Phi-3|Gemma-2|Q4_K_M|bge-m3|XLM-R|ROUGE-L|F1|Q4_1|fp32|bf16|fp16|float32|bfloat16)\b",
    r"\bconll2003(?:_\w+)?",
    r"\bfruit_v_animal_3\b",
    r"\b\w+_\d+\b",  # other task names with a digit (`*_3`)
    r"\bIWSLT\s*2017\b",
    r"\bXNLI(?:\s*1\.0)?\b",
    r"\bICML\s*2025\b",
    r"\b[WQ]\d+\b",  # the rebuttal's items (W1, Q1)
    r"\bseeds?[\s-]\d+(?:\s*(?:and|/|,)\s*\d+)*",
    r"\btop-\d+\b",
    r"\bS_t\b",
    r"\bpy3langid\b",
    r"\b\d+-shot\b",  # prompt kinds (5-shot, 0-shot)
    r"\b95\s*%",  # the confidence level of every interval
    r"\bp\s*<\s*0\.05\b",  # the significance level
]


def hand_typed_numbers(markdown: str) -> list[str]:
    """The numbers a page states outside macro calls, code and the names in `IDENTIFIERS`, each
    with a little context: a results page must return []."""
    text = markdown
    for pattern in _SKIPPED:
        text = re.sub(pattern, " ", text, flags=re.S | re.M)
    for pattern in IDENTIFIERS:
        text = re.sub(pattern, " ", text)
    found = []
    for match in re.finditer(r"\d+(?:[.,]\d+)*", text):
        start, end = max(0, match.start() - 30), min(len(text), match.end() + 30)
        found.append(" ".join(text[start:end].split()))
    return found


# ---------------------------------------------------------------------------------------------- mkdocs-macros
def define_env(env) -> None:
    """Register the functions above for pages that set `render_macros: true`."""
    for function in (
        value,
        csv,
        num,
        count,
        agg,
        json_value,
        cell_json,
        top_label,
        n_where,
        n_groups,
        share,
        first,
        json_num,
        paired,
        label_stats,
        mask_diff,
        rows,
        column,
        argmin_by,
        median,
        influence_reorder,
        table,
        pivot,
        group_table,
        format_number,
    ):
        env.macro(function)
    env.filter(format_number, "fmt")
    env.filter(median, "median")

    @env.macro
    def figure(path: str, height: int | None = None) -> str:
        return plotly_figure(path, page_url=env.page.url if env.page is not None else "", height=height)

    env.variables["repository_root"] = os.fspath(ROOT)
    from headsup_lens.demo import DemoConfig

    env.variables["demo_defaults"] = DemoConfig()  # the settings behind tests/pinned/demo/
