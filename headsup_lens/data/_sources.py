"""Readers for the paper's datasets: function-vector JSON, XNLI translation pairs, IWSLT2017, few-shot."""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import os
import re
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

from .._formats import Fields, FileFormatError, describe, parse_json, read_csv, read_jsonl, read_text
from ._paths import data_dir as resolve_data_dir
from ._task import N_EVAL, TASK_FILE_SUFFIXES, Pair, Task

# The 35 "simple tasks" (Todd et al., function vectors), named after their JSON files.
FV_TASKS = (
    "adjective_v_verb_3",
    "ag_news",
    "antonym",
    "capitalize",
    "capitalize_first_letter",
    "capitalize_last_letter",
    "capitalize_second_letter",
    "conll2003_location",
    "conll2003_organization",
    "conll2003_person",
    "country-capital",
    "country-currency",
    "english-french",
    "english-german",
    "english-spanish",
    "fruit_v_animal_3",
    "landmark-country",
    "lowercase_first_letter",
    "lowercase_last_letter",
    "national_parks",
    "next_capital_letter",
    "next_item",
    "object_v_concept_3",
    "park-country",
    "person-instrument",
    "person-occupation",
    "person-sport",
    "present-past",
    "prev_item",
    "product-company",
    "sentiment",
    "singular-plural",
    "synonym",
    "verb_v_adjective_3",
    "word_length",
)

# The paper grades capitalisation/letter, item-sequence and extraction tasks by "starts with", the rest
# by "contains" (its evaluation code lists them by name).
_STARTS_WITH = re.compile(r"^(capitalize|lowercase_|next_capital_letter|next_item|prev_item|conll2003_|.*_v_.*_3$)")


def fv_matcher(name: str) -> str:
    return "starts_with" if _STARTS_WITH.match(name) else "contains"


@functools.cache
def paper_instructions() -> dict[str, str]:
    """The paper's instructions per function-vector task (Table 10), shipped with the package."""

    table = json.loads(files("headsup_lens.data").joinpath("instructions.json").read_text(encoding="utf-8"))
    return dict(table["instructions"])


def instruction_template(name: str) -> str:
    """The instructed user text of a function-vector task, as a template with `{input}`."""
    return f"{paper_instructions()[name]}\n\nInput:\n\n{{input}}\n\nOutput:\n\n"


LANGUAGES = {
    "en": "English",
    "zh": "Chinese",
    "fr": "French",
    "es": "Spanish",
    "de": "German",
    "ru": "Russian",
    "ar": "Arabic",
}
CHAR_LEVEL_LANGUAGES = ("zh",)  # no spaces between words: ROUGE counts characters
TRANSLATION_TEMPLATE = "{input}\n\nTranslate into {language}:"
IWSLT_PAIRS = ("en-de", "en-fr", "en-zh")
SENTENCE_NEW_TOKENS = 50  # the paper's budget for sentence translation (10 for simple tasks)
# The paper trains translation masks 10 epochs over 9 900 XNLI pairs at batch 16: 10 x ceil(9900 / 16)
# steps (its evaluation loads checkpoint 6190). Simple tasks use the recipe's default, 6 250.
XNLI_PAPER_STEPS = 6190

# Llama-3 turn markers inside the shared few-shot files (`fewshot/hybrid.json`).
_LLAMA_ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
_LLAMA_USER = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"


# --------------------------------------------------------------------------- file readers
_TASK_FILE = "task file"
_PAIR_FIELDS, _PAIR_OPTIONAL = ("input", "output"), ("instruction",)


def _task_rows(path: Path) -> list[tuple[Fields, str, str, str | None]]:
    """`(field checks, input, output, instruction or None)` of every row of a task file, in order.

    A row is `{"input": str, "output": str}` with an optional `"instruction"` (CSV: the columns of
    those names). Inputs and outputs are non-empty strings; nothing else is accepted.
    """
    suffix = path.suffix.lower()
    rows: list[tuple[Fields, dict]] = []
    if suffix == ".csv":
        _, records = read_csv(path, _TASK_FILE, _PAIR_FIELDS, _PAIR_OPTIONAL)
        rows = [(Fields(_TASK_FILE, path, where), record) for where, record in records]
    elif suffix == ".jsonl":
        rows = [(Fields(_TASK_FILE, path, where), record) for where, record in read_jsonl(path, _TASK_FILE)]
    else:
        text = read_text(path, _TASK_FILE)
        if not text.strip():
            raise FileFormatError(_TASK_FILE, path, "", "is empty: it needs a JSON list of {'input', 'output'} objects")
        data = parse_json(text, _TASK_FILE, path)
        if not isinstance(data, list) or not data:
            raise FileFormatError(
                _TASK_FILE,
                path,
                "",
                f"expected a non-empty JSON list of {{'input', 'output'}} objects, got {describe(data)}",
            )
        rows = [(Fields(_TASK_FILE, path, f"entry {i}"), record) for i, record in enumerate(data)]
    if not rows:
        raise FileFormatError(_TASK_FILE, path, "", "holds no input/output pairs")
    out = []
    for fields, record in rows:
        record = fields.keys(record, _PAIR_FIELDS, _PAIR_OPTIONAL)
        instruction = record.get("instruction")
        if instruction is not None or "instruction" in record:
            instruction = fields.text("instruction", instruction)
        out.append(
            (fields, fields.text("input", record["input"]), fields.text("output", record["output"]), instruction)
        )
    return out


def _file_instruction(rows: list[tuple[Fields, str, str, str | None]]) -> str | None:
    """The task's one instruction template: on every row (the same text, with `{input}`) or on none."""
    given = [(fields, instruction) for fields, _, _, instruction in rows if instruction is not None]
    if not given:
        return None
    if len(given) < len(rows):
        fields = next(f for f, _, _, instruction in rows if instruction is None)
        raise fields.error("instruction", "is missing; a task has one instruction, on every row or on none")
    first = given[0][1]
    for fields, instruction in given:
        if instruction != first:
            raise fields.error(
                "instruction", f"differs from the first row's ({describe(first)}); a task has one instruction"
            )
    if "{input}" not in first:
        raise given[0][0].error(
            "instruction", f"the template {describe(first)} lacks '{{input}}' (where the input goes)"
        )
    return first


def _refuse_repeated_inputs(rows: list[tuple[Fields, str, str, str | None]]) -> None:
    """A repeated input could be both a training pair and a held-out one: an error naming both rows."""
    first: dict[str, Fields] = {}
    for fields, x, _, _ in rows:
        if x in first:
            raise fields.error(
                "input",
                f"{describe(x)} repeats the input of {first[x].where}; a task file lists each input once "
                "(a repeated input could land in both the training and the held-out split)",
            )
        first[x] = fields


def read_pairs_json(path: Path) -> list[Pair]:
    """A JSON list of `{"input": str, "output": str}` (an optional `"instruction"` too, see
    `read_task_file`), as the paper's datasets are stored; inputs may repeat (the paper's files
    repeat some). Anything else is a `FileFormatError` naming the file, the entry and the field."""
    return [(x, y) for _, x, y, _ in _task_rows(Path(path))]


def read_task_file(path: str | os.PathLike) -> tuple[list[Pair], str | None]:
    """`(pairs, instruction)` of your own task file: a `.json` list of `{"input": ..., "output": ...}`
    objects, `.jsonl` with one such object per line (split on "\\n" only), or a `.csv` whose header
    has `input` and `output` columns (read by the `csv` module: quote a field that holds a comma or
    a newline).

    Every row may also carry `"instruction"` (CSV: an `instruction` column): the task's instruction
    template with `{input}` where the input goes (e.g. `"Give the opposite of {input}."`), the same
    on every row; it makes the "instructed" rows of `evaluate` possible. Inputs and outputs are
    non-empty text; an input may appear once only (so that no training pair can also be a held-out
    one); unknown keys or columns, a duplicate JSON key and a row with too many or too few CSV fields
    are errors. Anything wrong is a `FileFormatError` naming the file, the line or row and the field.
    """
    path = Path(path).expanduser()
    if path.suffix.lower() not in TASK_FILE_SUFFIXES:
        raise ValueError(f"task file {path}: use a .json, .jsonl or .csv file of input/output pairs")
    rows = _task_rows(path)
    instruction = _file_instruction(rows)
    _refuse_repeated_inputs(rows)
    return [(x, y) for _, x, y, _ in rows], instruction


def read_pairs_file(path: str | os.PathLike) -> list[Pair]:
    """The (input, output) pairs of your own task file (see `read_task_file`, which also returns its
    instruction)."""
    return read_task_file(path)[0]


def task_from_file(path: str | os.PathLike, n_eval: int | None = None) -> Task:
    """Your own task from a file (see `read_task_file`), named after the file, with the file's
    instruction when it has one; the last `n_eval` pairs (default: min(100, half of them)) are held
    out for evaluation."""
    pairs, instruction = read_task_file(path)
    return Task.from_pairs(Path(path).stem, pairs, instruction=instruction, n_eval=n_eval)


def read_tsv_column_rows(path: Path) -> list[list[str]]:
    """Rows of a header-less TSV (XTREME's XNLI layout: premise, hypothesis[, label])."""
    if not path.is_file():
        raise ValueError(f"XNLI file {path} does not exist")
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text: {error}") from error
    if not rows or any(len(r) < 2 for r in rows):
        raise ValueError(f"{path} must have at least two tab-separated columns on every line")
    return rows


# --------------------------------------------------------------------------- tasks
def function_vector_task(name: str, data_dir: str | os.PathLike | None = None) -> Task:
    """One of the 35 function-vector tasks, with the paper's instruction and answer matcher."""
    if name not in FV_TASKS:
        raise ValueError(f"unknown function-vector task {name!r}; known: {', '.join(FV_TASKS)}")
    directory = resolve_data_dir(data_dir)
    pairs = read_pairs_json(directory / "function_vectors" / "abstractive" / f"{name}.json")
    # The paper holds out the last 100 of every dataset (the smallest has 197 pairs: 97 train / 100 eval).
    n_eval = N_EVAL if len(pairs) > N_EVAL else len(pairs) // 2
    return Task(name, tuple(pairs), instruction_template(name), fv_matcher(name), n_eval)


def _check_language(code: str) -> None:
    if code not in LANGUAGES:
        raise ValueError(f"unknown language {code!r}; use one of {', '.join(LANGUAGES)}")


def translation_instruction(tgt: str, *, code: bool = False) -> str:
    """`"{input}\n\nTranslate into Chinese:"`; with `code`, the language code (`"... into zh:"`), as
    the paper's IWSLT 2017 evaluation writes it."""
    _check_language(tgt)
    return TRANSLATION_TEMPLATE.replace("{language}", tgt if code else LANGUAGES[tgt])


def translation_task(
    src: str,
    tgt: str,
    data_dir: str | os.PathLike | None = None,
    *,
    max_pairs: int | None = None,
    n_eval: int = N_EVAL,
) -> Task:
    """Sentence translation `src` -> `tgt` built from the parallel XNLI dev+test files.

    Premises and hypotheses of row i are the same sentences in every language; each distinct
    source sentence gives one pair (first occurrence kept), dev before test, up to `max_pairs`.
    """
    _check_language(src)
    _check_language(tgt)
    if src == tgt:
        raise ValueError(f"source and target language are both {src!r}")
    directory = resolve_data_dir(data_dir) / "xnli"
    pairs: dict[str, str] = {}
    for split in ("dev", "test"):
        source_rows = read_tsv_column_rows(directory / f"{split}-{src}.tsv")
        target_rows = read_tsv_column_rows(directory / f"{split}-{tgt}.tsv")
        if len(source_rows) != len(target_rows):
            raise ValueError(
                f"XNLI {split} files for {src} and {tgt} have {len(source_rows)} and {len(target_rows)} rows; "
                "they must be parallel"
            )
        for source_row, target_row in zip(source_rows, target_rows):
            for column in (0, 1):
                x, y = source_row[column].strip(), target_row[column].strip()
                if x and y and x not in pairs:
                    pairs[x] = y
    items = list(pairs.items())[:max_pairs]
    return Task(
        f"translation/{src}-{tgt}",
        tuple(items),
        translation_instruction(tgt),
        "contains",
        min(n_eval, len(items) // 2),
        char_level=tgt in CHAR_LEVEL_LANGUAGES,
        max_new_tokens=SENTENCE_NEW_TOKENS,
        target_language=tgt,
        paper_steps=XNLI_PAPER_STEPS,
    )


def iwslt_task(src: str, tgt: str, data_dir: str | os.PathLike | None = None) -> Task:
    """IWSLT2017 test pairs (for BLEU, Table 8); every pair is held out (`n_eval` = all)."""
    _check_language(src)
    _check_language(tgt)
    name = next((p for p in IWSLT_PAIRS if set(p.split("-")) == {src, tgt}), None)
    if name is None:
        raise ValueError(
            f"no IWSLT2017 test set for {src}-{tgt}; available: {', '.join(IWSLT_PAIRS)} (both directions)"
        )
    path = resolve_data_dir(data_dir) / "iwslt2017" / f"{name}-test.parquet"
    if not path.is_file():
        raise ValueError(f"IWSLT2017 file {path} does not exist")
    import pandas as pd  # deferred: listing tasks stays light

    try:
        frame = pd.read_parquet(path)
        pairs = [(str(t[src]).strip(), str(t[tgt]).strip()) for t in frame["translation"]]
    except Exception as error:  # pyarrow raises its own error types on corrupt files
        raise ValueError(f"{path} is not an IWSLT2017 parquet file with a 'translation' column: {error}") from error
    pairs = [p for p in pairs if p[0] and p[1]]
    return Task(
        f"iwslt2017/{src}-{tgt}",
        tuple(pairs),
        translation_instruction(tgt, code=True),
        "contains",
        len(pairs),
        char_level=tgt in CHAR_LEVEL_LANGUAGES,
        max_new_tokens=SENTENCE_NEW_TOKENS,
        target_language=tgt,
    )


# The reference's seed (`--seed 42` in its scripts) and the rows it keeps out of few-shot training as
# its own dev set, besides the held-out last 100 and the demonstrations.
FEWSHOT_SEED = 42
FEWSHOT_DEV = 100
# Tasks with no pair in the shared `fewshot/hybrid.json` (its 3 094 rows come from the other 31 of the
# 35 function-vector tasks): a hybrid mask has never seen them (Table 3's unseen tasks).
HYBRID_UNSEEN = ("ag_news", "conll2003_location", "product-company", "sentiment")


def fewshot(task: Task, k: int = 5, seed: int = FEWSHOT_SEED, *, dev: int = FEWSHOT_DEV) -> Task:
    """The `k`-shot variant of a task (Table 3), with the demonstrations the reference code selects.

    The training split is shuffled with `seed` (numpy's `default_rng(seed).permutation`, which is
    what `datasets.Dataset.shuffle(seed=seed)` uses in the reference); its first `k` rows become the
    demonstrations shown before every example, and they leave the training data together with the
    last `dev` shuffled rows (the reference's dev set during training). The held-out split (the
    task's last `n_eval` pairs) is unchanged. Demonstrations are rendered as earlier turns in the
    model's prompt format at tokenisation time.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if dev < 0:
        raise ValueError(f"dev must be >= 0, got {dev}")
    train = task.train_pairs
    if len(train) <= k + dev:
        raise ValueError(
            f"task {task.name!r} has {len(train)} training pairs, too few for k={k} demonstrations "
            f"and dev={dev} more rows kept out of training"
        )
    import numpy as np  # deferred: listing tasks stays light

    shuffled = [train[i] for i in np.random.default_rng(seed).permutation(len(train))]
    demonstrations = tuple(shuffled[:k])
    pairs = tuple(shuffled[k : len(shuffled) - dev]) + task.eval_pairs
    return dataclasses.replace(task, name=f"fewshot/{task.name}", pairs=pairs, shots=(demonstrations,) * len(pairs))


def parse_llama_fewshot(text: str) -> tuple[tuple[Pair, ...], str]:
    """Split a Llama-3 formatted few-shot input into its demonstrations and the final query."""
    turns = text.split(_LLAMA_USER)
    shots = []
    for turn in turns[:-1]:
        parts = turn.split(_LLAMA_ASSISTANT)
        if len(parts) != 2:
            raise ValueError(f"malformed few-shot demonstration (expected one assistant turn): {turn!r:.120}")
        shots.append((parts[0], parts[1]))
    if _LLAMA_ASSISTANT in turns[-1]:
        raise ValueError(f"malformed few-shot query (it contains an assistant turn): {turns[-1]!r:.120}")
    return tuple(shots), turns[-1]


def hybrid_task(data_dir: str | os.PathLike | None = None) -> Task:
    """The paper's hybrid 5-shot mixture of 32 tasks (Table 3), re-rendered for any chat template."""
    path = resolve_data_dir(data_dir) / "function_vectors" / "fewshot" / "hybrid.json"
    rows = read_pairs_json(path)
    pairs, shots = [], []
    for x, y in rows:
        demos, query = parse_llama_fewshot(x)
        if not demos:
            raise ValueError(f"{path}: an entry has no demonstrations: {x!r:.120}")
        pairs.append((query, y))
        shots.append(demos)
    return Task("fewshot/hybrid", tuple(pairs), None, "contains", min(N_EVAL, len(pairs) // 2), shots=tuple(shots))


def task_mixture(tasks: Sequence[Task], name: str) -> Task:
    """One task made of several (a hybrid mixture, Table 3, for tasks without the shared
    `fewshot/hybrid.json`): every task's training pairs, then every task's held-out pairs (held out
    together), each pair with its own demonstrations (none for a zero-shot task). A mask trained on
    it is meant for other tasks, so it carries no instruction and grades by "contains"."""
    tasks = list(tasks)
    if len(tasks) < 2:
        raise ValueError(f"a task mixture needs at least two tasks, got {len(tasks)}")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"the tasks of a mixture must be distinct, got {names}")
    pairs, shots = [], []
    for split in ("train", "eval"):
        for t in tasks:
            indices = range(t.n_train) if split == "train" else range(t.n_train, len(t.pairs))
            pairs += [t.pairs[i] for i in indices]
            shots += [t.demonstrations(i) for i in indices]
    return Task(name, tuple(pairs), None, "contains", sum(t.n_eval for t in tasks), shots=tuple(shots))
