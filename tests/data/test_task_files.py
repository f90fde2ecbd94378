"""Your own task files (JSON, JSON lines, CSV): read by the standard parsers against their schema, an
optional instruction, no repeated input, and characters the tokenizer cannot encode refused."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from headsup_lens import FileFormatError
from headsup_lens.data import load_task, read_pairs_file, read_task_file, task_from_file, tokenize_pairs, tokenize_task


def write_csv(path: Path, rows: list[dict], fieldnames=("input", "output")) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(fieldnames))
        writer.writeheader()
        writer.writerows(rows)
    return path


# ---------------------------------------------------------------------- the examples
def test_a_quoted_newline_in_a_csv_field_survives(tmp_path):
    path = write_csv(
        tmp_path / "t.csv", [{"input": "line one\nline two", "output": "a, b"}, {"input": "c", "output": "d"}]
    )
    assert read_pairs_file(path) == [("line one\nline two", "a, b"), ("c", "d")]


def test_an_unquoted_extra_comma_is_an_error_naming_the_row(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("input,output\nhot,cold\nbig,small,tiny\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"t.csv', row 2 \(line 3\): has 3 fields, the header has 2 \(a comma"):
        read_pairs_file(path)
    path.write_text("input,output\nhot\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"row 1 \(line 2\): has 1 fields, the header has 2"):
        read_pairs_file(path)


def test_a_jsonl_line_holding_u2028_is_one_line(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"input": "first\u2028second", "output": "x\u2029y\x85z"}, {"input": "b", "output": "c"}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert read_pairs_file(path) == [("first\u2028second", "x\u2029y\x85z"), ("b", "c")]


def test_a_repeated_input_is_refused_so_no_training_pair_is_held_out(tmp_path):
    pairs = [{"input": f"w{i}", "output": f"W{i}"} for i in range(6)] + [{"input": "w1", "output": "W1"}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(pairs))
    with pytest.raises(FileFormatError, match=r"entry 6, field 'input': 'w1' repeats the input of entry 1"):
        task_from_file(path)
    write_csv(tmp_path / "t.csv", pairs)
    with pytest.raises(FileFormatError, match=r"row 7 \(line 8\), field 'input': 'w1' repeats the input of row 2"):
        load_task(str(tmp_path / "t.csv"))


def test_the_paper_reader_keeps_the_papers_repeated_inputs(tmp_path):
    from headsup_lens.data import read_pairs_json

    path = tmp_path / "conll.json"
    path.write_text(json.dumps([{"input": "Paris", "output": "Paris"}] * 2))
    assert read_pairs_json(path) == [("Paris", "Paris")] * 2


@pytest.mark.parametrize("text", ["a\tb", "caf\u00e9", "no\u00a0break"])
def test_a_character_the_tokenizer_lacks_is_an_error_at_encoding_time(llama, text):
    # The character tokenizer has no TAB, é or no-break space: each used to become <pad> unseen.
    with pytest.raises(ValueError, match="cannot encode") as info:
        tokenize_pairs(llama, [(text, "ok")])
    assert "padding token" in str(info.value)
    with pytest.raises(ValueError, match="cannot encode"):
        tokenize_pairs(llama, [("ok", text)])


def test_a_tab_in_a_task_file_fails_when_the_task_is_tokenised(llama, tmp_path):
    path = write_csv(tmp_path / "t.csv", [{"input": f"w{c}\tx", "output": "y"} for c in "abcd"])
    task = task_from_file(path)  # the file is fine; the model cannot take it
    with pytest.raises(ValueError, match=r"cannot encode: '\\t'; .*\(U\+0009 TAB\)$"):
        tokenize_task(llama, task)


def test_byte_level_tokenizers_take_a_tab(qwen2):
    assert len(tokenize_pairs(qwen2, [("a\tb", "c")])) == 1


# ---------------------------------------------------------------------- instructions (issue 36)
def test_a_task_file_carries_an_instruction(tmp_path):
    rows = [{"input": f"w{i}", "output": f"W{i}", "instruction": "Capitalise: {input}"} for i in range(4)]
    (tmp_path / "t.json").write_text(json.dumps(rows))
    (tmp_path / "t.jsonl").write_text("\n".join(map(json.dumps, rows)))
    write_csv(tmp_path / "t.csv", rows, ("input", "output", "instruction"))
    for suffix in (".json", ".jsonl", ".csv"):
        task = load_task(str(tmp_path / f"t{suffix}"))
        assert task.instruction == "Capitalise: {input}"
        assert task.user_text("w0", instructed=True) == "Capitalise: w0"
    assert read_task_file(tmp_path / "t.csv") == ([(f"w{i}", f"W{i}") for i in range(4)], "Capitalise: {input}")


@pytest.mark.parametrize(
    "instructions, message",
    [
        (["A {input}", "B {input}"], r"entry 1, field 'instruction': differs from the first row's"),
        (["A {input}", None], r"entry 1, field 'instruction': is missing"),
        (["Answer.", "Answer."], r"entry 0, field 'instruction': the template 'Answer.' lacks '\{input\}'"),
        ([3, 3], r"entry 0, field 'instruction': expected a string, got 3"),
    ],
)
def test_a_task_file_has_one_instruction_with_a_place_for_the_input(tmp_path, instructions, message):
    rows = [{"input": f"w{i}", "output": "x"} for i in range(2)]
    for row, instruction in zip(rows, instructions):
        if instruction is not None:
            row["instruction"] = instruction
    (tmp_path / "t.json").write_text(json.dumps(rows))
    with pytest.raises(FileFormatError, match=message):
        read_task_file(tmp_path / "t.json")


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("t.json", '[{"input": "a", "input": "b", "output": "c"}]', "the key 'input' appears twice"),
        ("t.json", '[{"input": "a", "output": "b", "label": 1}]', r"entry 0: unknown key\(s\) \['label'\]"),
        ("t.json", '[{"input": "", "output": "b"}]', "entry 0, field 'input': expected a non-empty string"),
        ("t.json", '{"input": "a", "output": "b"}', "expected a non-empty JSON list"),
        ("t.jsonl", '{"input": "a", "output": "b"}\n\n[1]\n', "line 3: expected an object with input, output"),
        ("t.jsonl", '{"input": "a", "output": true}', "line 1, field 'output': expected a string, got True"),
        ("t.csv", "input,output,notes\na,b,c\n", r"line 1: unknown column\(s\) \['notes'\]"),
        ("t.csv", 'input,output\n"a,b\n', "line 2: not valid CSV"),
        ("t.csv", "input,output\na,\n", r"row 1 \(line 2\), field 'output': expected a non-empty string"),
    ],
)
def test_malformed_task_files_name_the_line_and_field(tmp_path, name, content, message):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(FileFormatError, match=message):
        read_task_file(tmp_path / name)


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path):
    (tmp_path / "t.csv").write_bytes("\ufeffinput,output\r\na,b\r\n".encode())
    assert read_pairs_file(tmp_path / "t.csv") == [("a", "b")]
    (tmp_path / "t.jsonl").write_bytes(b'{"input": "a", "output": "b"}\r\n{"input": "c", "output": "d"}\r\n')
    assert read_pairs_file(tmp_path / "t.jsonl") == [("a", "b"), ("c", "d")]


# ---------------------------------------------------------------------- properties
texts = st.text(min_size=1, max_size=12)
pair_lists = st.lists(st.tuples(texts, texts), min_size=1, max_size=8, unique_by=lambda pair: pair[0])
instructions = st.none() | st.builds(lambda a, b: f"{a}{{input}}{b}", st.text(max_size=6), st.text(max_size=6))


def write_task(folder: Path, suffix: str, pairs, instruction, ascii_json: bool) -> Path:
    rows = [{"input": x, "output": y} | ({"instruction": instruction} if instruction else {}) for x, y in pairs]
    path = folder / f"task{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=ascii_json), encoding="utf-8")
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r, ensure_ascii=ascii_json) for r in rows) + "\n", encoding="utf-8")
    else:
        write_csv(path, rows, ("input", "output", "instruction") if instruction else ("input", "output"))
    return path


@given(
    pairs=pair_lists,
    instruction=instructions,
    suffix=st.sampled_from([".json", ".jsonl", ".csv"]),
    ascii_json=st.booleans(),
)
def test_task_files_round_trip(pairs, instruction, suffix, ascii_json):
    with tempfile.TemporaryDirectory() as folder:
        path = write_task(Path(folder), suffix, pairs, instruction, ascii_json)
        assert read_task_file(path) == (list(pairs), instruction)
        task = task_from_file(path)
    assert task.pairs == tuple(pairs) and task.instruction == instruction
    assert not {x for x, _ in task.train_pairs} & {x for x, _ in task.eval_pairs}


not_text = st.none() | st.booleans() | st.integers() | st.floats() | st.lists(st.integers(), max_size=2)


@given(data=st.data(), pairs=pair_lists, suffix=st.sampled_from([".json", ".jsonl"]))
def test_a_task_field_of_the_wrong_type_is_a_format_error_naming_it(data, pairs, suffix):
    rows = [{"input": x, "output": y} for x, y in pairs]
    i = data.draw(st.integers(0, len(rows) - 1))
    field = data.draw(st.sampled_from(["input", "output"]))
    change = data.draw(st.sampled_from(["type", "empty", "missing", "unknown key", "repeat"]))
    if change == "type":
        rows[i][field] = data.draw(not_text)
    elif change == "empty":
        rows[i][field] = ""
    elif change == "missing":
        del rows[i][field]
    elif change == "unknown key":
        rows[i]["extra"] = 1
    else:
        rows.append(dict(rows[i]))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"t{suffix}"
        path.write_text(json.dumps(rows) if suffix == ".json" else "\n".join(map(json.dumps, rows)), encoding="utf-8")
        with pytest.raises(FileFormatError) as info:
            read_task_file(path)
    where = f"entry {len(rows) - 1 if change == 'repeat' else i}" if suffix == ".json" else "line "
    assert str(path) in str(info.value) and where in str(info.value)


# A case: pairs, the row made wrong and how many fields it gets instead of two.
broken_rows = pair_lists.flatmap(
    lambda pairs: st.tuples(st.just(pairs), st.integers(0, len(pairs) - 1), st.sampled_from([1, 3, 4]))
)


@given(case=broken_rows)
@example(case=([("a\r\nb", "c"), ("d\re", "f\r\n")], 1, 3))  # line ends inside quoted values
def test_a_csv_row_with_a_field_too_many_or_too_few_is_a_format_error(case):
    # Each row is encoded on its own, as the csv module writes it: a value may hold "\r\n" or "\r"
    # (quoted), so the file's text is never split on line ends to find its rows.
    pairs, i, n_fields = case
    rows = [csv_record(["input", "output"]), *(csv_record(pair) for pair in pairs)]
    rows[i + 1] = csv_record([*pairs[i], "extra", "more"][:n_fields])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text("".join(rows), encoding="utf-8", newline="")
        with pytest.raises(FileFormatError, match=f"row {i + 1} \\(line \\d+\\): has {n_fields} fields"):
            read_task_file(path)


def csv_record(fields) -> str:
    """One CSV record as `csv.writer` writes it (quoted where a field needs it, ending in "\r\n")."""
    out = io.StringIO()
    csv.writer(out).writerow(fields)
    return out.getvalue()


@given(text=st.text(max_size=60), suffix=st.sampled_from([".json", ".jsonl", ".csv"]))
def test_arbitrary_text_is_a_task_or_a_format_error(text, suffix):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"t{suffix}"
        path.write_text(text, encoding="utf-8")
        try:
            pairs, _ = read_task_file(path)
        except FileFormatError as error:
            assert str(path) in str(error)
        else:
            assert pairs and all(isinstance(x, str) and x and isinstance(y, str) and y for x, y in pairs)
