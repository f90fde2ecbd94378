"""Tasks, loaders, the registry and answer-only tokenisation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens.data import (
    FV_TASKS,
    HYBRID_UNSEEN,
    IGNORE_INDEX,
    Task,
    data_dir,
    fewshot,
    function_vector_task,
    hybrid_task,
    iwslt_task,
    load_task,
    register_task,
    render_prompt,
    task_mixture,
    task_names,
    tokenize_pairs,
    tokenize_task,
    translation_task,
)
from headsup_lens.models import prompt_format

LLAMA_USER = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
LLAMA_ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


def write_fv(root, name, pairs):
    path = root / "function_vectors" / "abstractive" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"input": x, "output": y} for x, y in pairs]), encoding="utf-8")
    return path


def write_xnli(root, lang, split, rows):
    path = root / "xnli" / f"{split}-{lang}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")


# --------------------------------------------------------------------------- Task
def test_task_splits_prompts_and_matchers():
    pairs = [(f"in{i}", f"out{i}") for i in range(10)]
    task = Task.from_pairs("t", pairs, instruction="Do it: {input} now", n_eval=3)
    assert task.train_pairs == tuple(pairs[:7]) and task.eval_pairs == tuple(pairs[7:])
    assert task.user_text("x{y}") == "x{y}"
    assert task.user_text("x{y}", instructed=True) == "Do it: x{y} now"
    assert task.is_correct("so out1 it is", "out1") and not task.is_correct("ou", "out1")
    starts = Task.from_pairs("s", pairs, matcher="starts_with", n_eval=2)
    assert starts.is_correct(" W and more", "W") and not starts.is_correct("a W", "W")
    assert Task.from_pairs("d", pairs).n_eval == 5  # min(100, half the pairs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(pairs=[]), "no (input, output) pairs"),
        (dict(pairs=[("a", "b")], instruction="no placeholder"), "lacks '{input}'"),
        (dict(pairs=[("a", "b")], matcher="exact"), "matcher must be one of"),
        (dict(pairs=[("a", "b")], n_eval=2), "n_eval=2"),
        (dict(pairs=[("a", "b", "c")]), "not an (input, output) pair"),
    ],
)
def test_task_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Task.from_pairs("bad", **kwargs)


def test_an_input_with_two_answers_is_refused_wherever_it_falls():
    pairs = [("hot", "cold"), ("big", "small"), ("up", "down"), ("hot", "warm")]
    for n_eval in (0, 1, 2):  # both in training, one on each side, and so on: never two answers
        with pytest.raises(
            ValueError, match=r"pairs\[3\] gives input 'hot' the answer 'warm', but pairs\[0\] gave it 'cold'"
        ):
            Task.from_pairs("t", pairs, n_eval=n_eval)


def test_a_pair_repeated_across_the_split_is_refused_and_within_a_split_kept():
    pairs = [("hot", "cold"), ("big", "small"), ("up", "down"), ("hot", "cold")]
    with pytest.raises(ValueError, match=r"pairs\[3\] repeats pairs\[0\] \('hot', 'cold'\) across the split"):
        Task.from_pairs("t", pairs)  # two held out: the repeat would be graded after being trained on
    kept = Task.from_pairs("t", pairs, n_eval=0)
    assert kept.train_pairs == tuple(pairs)  # a repeat within training weighs the pair twice
    held = Task.from_pairs("t", [("in", "out"), *pairs[:3], pairs[0]], n_eval=4)
    assert held.train_pairs == (("in", "out"),) and held.eval_pairs.count(("hot", "cold")) == 2
    assert set(held.train_pairs).isdisjoint(held.eval_pairs)


@given(
    pairs=st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from("xyz")), min_size=1, max_size=10),
    data=st.data(),
)
def test_from_pairs_never_splits_an_input_or_gives_it_two_answers(pairs, data):
    n_eval = data.draw(st.none() | st.integers(0, len(pairs)))
    try:
        task = Task.from_pairs("t", pairs, n_eval=n_eval)
    except ValueError as error:
        assert str(error).startswith("task 't': pairs[") and (
            "one answer" in str(error) or "across the split" in str(error)
        )
        answers = {}
        for x, y in pairs:
            answers.setdefault(x, set()).add(y)
        n_train = len(pairs) - (min(100, len(pairs) // 2) if n_eval is None else n_eval)
        split = {x for x, _ in pairs[:n_train]} & {x for x, _ in pairs[n_train:]}
        assert split or any(len(a) > 1 for a in answers.values())  # refused only for a reason
    else:
        assert task.pairs == tuple(pairs)
        assert not {x for x, _ in task.train_pairs} & {x for x, _ in task.eval_pairs}
        assert len(dict(pairs)) == len(set(pairs))  # one answer per input


def test_uninstructed_task_refuses_instructed_text_and_empty_splits():
    task = Task.from_pairs("t", [("a", "b"), ("c", "d")], n_eval=0)
    with pytest.raises(ValueError, match="no instruction template"):
        task.user_text("a", instructed=True)
    with pytest.raises(ValueError, match="no eval pairs"):
        task.split_indices("eval")


# --------------------------------------------------------------------------- data directory and files
def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSUP_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    assert data_dir(other) == other  # the argument wins over the environment
    monkeypatch.setenv("HEADSUP_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="headsup download-data"):
        data_dir()


def test_function_vector_loader_on_written_files(tmp_path):
    pairs = [(f"w{i}", f"W{i}") for i in range(250)]
    write_fv(tmp_path, "capitalize", pairs)
    task = function_vector_task("capitalize", tmp_path)
    assert len(task.pairs) == 250 and task.eval_pairs == tuple(pairs[150:])
    # The paper's Table 10 instruction, shipped with the package, in its evaluation's layout.
    assert task.matcher == "starts_with"
    assert task.instruction == (
        "Output the given word with its first letter capitalized.\n\nInput:\n\n{input}\n\nOutput:\n\n"
    )
    write_fv(tmp_path, "antonym", pairs)
    assert load_task("antonym", tmp_path).matcher == "contains"


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "is empty"),
        ("[]", "non-empty JSON list"),
        ('{"input": "a"}', "non-empty JSON list"),
        ('[{"input": "a"}]', "entry 0"),
        ('[{"input": "a", "output": 3}]', "entry 0"),
    ],
)
def test_malformed_task_files(tmp_path, content, message):
    path = write_fv(tmp_path, "antonym", [("a", "b")])
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_task("antonym", tmp_path)


def test_missing_task_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_task("antonym", tmp_path)


def test_translation_from_parallel_xnli(tmp_path):
    for lang, words in (("en", ["p0", "h0", "h1", "p1", "h2"]), ("zh", ["前0", "后0", "后1", "前1", "后2"])):
        # Two premises repeated for their hypotheses, as in XNLI dev (premise, hypothesis, label).
        write_xnli(tmp_path, lang, "dev", [[words[0], words[1], "x"], [words[0], words[2], "y"]])
        write_xnli(tmp_path, lang, "test", [[words[3], words[4]], [words[3], words[1]]])
    task = translation_task("en", "zh", tmp_path, n_eval=2)
    assert task.pairs == (("p0", "前0"), ("h0", "后0"), ("h1", "后1"), ("p1", "前1"), ("h2", "后2"))
    assert task.n_eval == 2 and task.char_level and task.name == "translation/en-zh"
    assert task.user_text("p0", instructed=True) == "p0\n\nTranslate into Chinese:"
    reverse = load_task("translation/zh-en", tmp_path)
    assert reverse.pairs[0] == ("前0", "p0") and not reverse.char_level
    write_xnli(tmp_path, "fr", "dev", [["a", "b", "c"]])
    with pytest.raises(ValueError, match="must be parallel"):
        translation_task("en", "fr", tmp_path)
    with pytest.raises(ValueError, match="unknown language"):
        translation_task("en", "xx", tmp_path)


def test_iwslt_loader(tmp_path):
    (tmp_path / "iwslt2017").mkdir()
    frame = pd.DataFrame(
        {
            "doc_id": [1, 1],
            "seg_id": [1, 2],
            "translation": [{"en": "Hello.", "de": "Hallo."}, {"en": "Bye.", "de": "Tschüss."}],
        }
    )
    frame.to_parquet(tmp_path / "iwslt2017" / "en-de-test.parquet")
    task = iwslt_task("de", "en", tmp_path)
    assert task.pairs == (("Hallo.", "Hello."), ("Tschüss.", "Bye.")) and task.eval_pairs == task.pairs
    with pytest.raises(ValueError, match="no IWSLT2017 test set"):
        iwslt_task("en", "ru", tmp_path)


def test_fewshot_selects_demonstrations_as_the_reference(tmp_path):
    import datasets

    task = Task.from_pairs("t", [(f"x{i}", f"y{i}") for i in range(130)], n_eval=10)
    shot = fewshot(task, k=5, seed=42, dev=20)  # the paper's: the same five demonstrations before every example
    # The reference: Dataset(train split).shuffle(seed); first 5 = demonstrations; the last `dev` rows = its dev set.
    shuffled = datasets.Dataset.from_dict(
        {"x": [x for x, _ in task.train_pairs], "y": [y for _, y in task.train_pairs]}
    ).shuffle(seed=42)
    reference = list(zip(shuffled["x"], shuffled["y"]))
    assert shot.name == "fewshot/t" and shot.shots[0] == tuple(reference[:5])
    assert len(set(shot.shots)) == 1 and len(shot.shots) == len(shot.pairs)
    assert shot.train_pairs == tuple(reference[5:100]) and shot.eval_pairs == task.eval_pairs
    assert not set(shot.shots[0]) & set(shot.train_pairs) and not set(reference[100:]) & set(shot.pairs)
    assert fewshot(task, k=5, seed=42, dev=20) == shot and fewshot(task, k=5, seed=2, dev=20) != shot
    assert fewshot(task).shots[0] == shot.shots[0]  # seed 42 and dev 100 by default
    with pytest.raises(ValueError, match="too few"):
        fewshot(task, k=5, dev=116)
    with pytest.raises(ValueError, match="dev must be"):
        fewshot(task, dev=-1)


def test_hybrid_file_is_re_rendered_for_the_model(tmp_path, llama, gpt2):
    text = f"a{LLAMA_ASSISTANT}A{LLAMA_USER}b{LLAMA_ASSISTANT}B{LLAMA_USER}c"
    path = tmp_path / "function_vectors" / "fewshot" / "hybrid.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([{"input": text, "output": "C"}] * 4), encoding="utf-8")
    task = hybrid_task(tmp_path)
    assert task.pairs[0] == ("c", "C") and task.shots[0] == (("a", "A"), ("b", "B"))
    assert (
        render_prompt(llama, "c", task.shots[0])
        == "<user> a <assistant> A<eos><user> b <assistant> B<eos><user> c <assistant> "
    )
    assert render_prompt(gpt2, "c", task.shots[0]) == "a\n\nA\n\nb\n\nB\n\nc\n\n"
    # Rendered in the paper's Llama-3 format, the demonstrations give back the file's own text.
    from headsup_lens.models import PAPER_FORMATS

    assert PAPER_FORMATS["llama3"].render("c", task.shots[0]) == PAPER_FORMATS["llama3"].format(text)
    path.write_text(json.dumps([{"input": f"a{LLAMA_ASSISTANT}A{LLAMA_ASSISTANT}x{LLAMA_USER}c", "output": "C"}]))
    with pytest.raises(ValueError, match="malformed few-shot"):
        hybrid_task(tmp_path)


def test_task_mixture_keeps_each_pair_with_its_demonstrations():
    a = fewshot(Task.from_pairs("a", [(f"a{i}", f"A{i}") for i in range(120)], n_eval=10), k=2, dev=5)
    b = Task.from_pairs("b", [(f"b{i}", f"B{i}") for i in range(30)], n_eval=4)  # zero-shot: no demonstrations
    mix = task_mixture([a, b], "mix")
    assert mix.name == "mix" and mix.instruction is None and mix.matcher == "contains"
    assert mix.train_pairs == a.train_pairs + b.train_pairs and mix.eval_pairs == a.eval_pairs + b.eval_pairs
    by_pair = dict(zip(mix.pairs, mix.shots))
    assert all(by_pair[p] == a.shots[0] for p in a.pairs) and all(by_pair[p] == () for p in b.pairs)
    with pytest.raises(ValueError, match="at least two"):
        task_mixture([a], "one")
    with pytest.raises(ValueError, match="distinct"):
        task_mixture([a, a], "twice")


def test_registry_refuses_duplicates_and_lists_known_names():
    assert "antonym" in task_names() and "translation/en-zh" in task_names() and "fewshot/hybrid" in task_names()
    with pytest.raises(ValueError, match="already registered"):
        register_task("antonym", lambda d: None)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        load_task("nope")
    register_task("test/tiny", lambda d: Task.from_pairs("test/tiny", [("a", "b"), ("c", "d")]))
    assert load_task("test/tiny").pairs == (("a", "b"), ("c", "d"))


# --------------------------------------------------------------------------- tokenisation
def test_labels_cover_exactly_the_answer_and_end_of_turn(any_model):
    pairs = [("abc", "Xy"), ("hello there", "z"), ("q", "long answer")]
    batch = tokenize_pairs(any_model, pairs)
    template = prompt_format(any_model)
    tokenizer = any_model.tokenizer
    for row, (x, y) in enumerate(pairs):
        length = int(batch.attention_mask[row].sum())
        assert batch.attention_mask[row, :length].all() and not batch.attention_mask[row, length:].any()
        labelled = (batch.labels[row] != IGNORE_INDEX).nonzero().flatten()
        start = int(labelled[0])
        assert labelled.tolist() == list(range(start, length))  # contiguous, up to the last real token
        # Tokenised jointly, as the paper's code does: the ids are those of the whole text.
        whole = template.format(x) + template.answer(y)
        ids = tokenizer(whole, add_special_tokens=False)["input_ids"]
        if template.add_bos:
            ids = [tokenizer.bos_token_id, *ids]
        assert batch.input_ids[row, :length].tolist() == ids
        assert start == len(tokenizer(template.format(x), add_special_tokens=False)["input_ids"]) + template.add_bos
        assert (batch.labels[row, start:length] == batch.input_ids[row, start:length]).all()


def test_instructed_tokenisation_and_empty_answer(llama):
    task = Task.from_pairs("t", [("ab", "c"), ("de", "f")], instruction="Say: {input}", n_eval=1)
    batch = tokenize_task(llama, task, "train", instructed=True)
    assert llama.tokenizer.decode(batch.input_ids[0]).startswith("<user> Say: ab <assistant> c")
    with pytest.raises(ValueError, match="empty after tokenisation"):
        tokenize_pairs(llama, [("ab", "")])


# --------------------------------------------------------------------------- the shared data
def test_shared_data(shared_data_dir, llama):
    antonym = load_task("antonym", shared_data_dir)
    assert len(antonym.pairs) == 2398 and antonym.n_eval == 100 and antonym.n_train == 2298
    assert antonym.instruction.startswith("Identify the antonym")  # the paper's Table 10 wording
    capitals = load_task("country-capital", shared_data_dir)  # 197 pairs: the last 100 are still held out
    assert capitals.n_eval == 100 and capitals.eval_pairs == capitals.pairs[-100:] and capitals.n_train == 97
    for name in ("capitalize_first_letter", "conll2003_person", "fruit_v_animal_3", "next_item", "prev_item"):
        assert load_task(name, shared_data_dir).matcher == "starts_with"
    assert load_task("sentiment", shared_data_dir).matcher == "contains"
    en_zh = load_task("translation/en-zh", shared_data_dir)
    assert len(en_zh.pairs) == 9999 and en_zh.char_level and en_zh.eval_pairs == en_zh.pairs[-100:]
    assert len({x for x, _ in en_zh.pairs}) == len(en_zh.pairs)
    hybrid = load_task("fewshot/hybrid", shared_data_dir)
    assert len(hybrid.pairs) == 3094 and all(len(s) == 5 for s in hybrid.shots)
    seen = set(hybrid.pairs) | {pair for shots in hybrid.shots for pair in shots}
    unseen = [name for name in FV_TASKS if not seen & set(load_task(name, shared_data_dir).pairs)]
    assert tuple(unseen) == HYBRID_UNSEEN
    fewshot_antonym = load_task("fewshot/antonym", shared_data_dir)
    assert fewshot_antonym.n_train == 2298 - 105 and fewshot_antonym.eval_pairs == antonym.eval_pairs
    assert len(load_task("iwslt2017/en-zh", shared_data_dir).pairs) == 8549
    batch = tokenize_task(llama, antonym, "eval")
    assert batch.input_ids.shape[0] == 100
    eot = len(llama.tokenizer("<eos>", add_special_tokens=False)["input_ids"])
    answer_tokens = sum(
        len(llama.tokenizer(y.strip(), add_special_tokens=False)["input_ids"]) + eot for _, y in antonym.eval_pairs
    )
    assert batch.n_answer_tokens == answer_tokens


@pytest.mark.parametrize("seed", range(20))
def test_length_groups_is_the_cheapest_contiguous_cut(seed):
    """Against brute force over every cut of the sorted rows: each index exactly once, and no
    cheaper grouping of rows × longest row + overhead per pass exists."""
    import itertools
    import random

    from headsup_lens.data import length_groups

    rng = random.Random(seed)
    lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 8))]
    overhead, cap = rng.choice([0.0, 5.0, 40.0, 1e4]), rng.choice([None, 1, 3])
    groups = length_groups(lengths, overhead=overhead, max_rows=cap)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(len(g) <= (cap or len(lengths)) for g in groups)

    def cost(parts):
        return sum(len(p) * max(lengths[i] for i in p) + overhead for p in parts)

    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = min(
        cost([order[a:b] for a, b in zip((0, *cuts), (*cuts, len(order)))])
        for k in range(len(order))
        for cuts in itertools.combinations(range(1, len(order)), k)
        if all(b - a <= (cap or len(order)) for a, b in zip((0, *cuts), (*cuts, len(order))))
    )
    assert cost(groups) == pytest.approx(best)
    with pytest.raises(ValueError, match="max_rows must be positive"):
        length_groups(lengths, overhead=overhead, max_rows=0)


def _plain_length_groups(lengths, overhead, max_rows=None):
    """The plain dynamic programme over every cut (every group end, every start): O(n x max_rows)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n, cap = len(order), max_rows or len(order)
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(max(0, j - cap), j):
            cost = best[i] + (j - i) * lengths[order[j - 1]] + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


@pytest.mark.parametrize("seed", range(40))
def test_length_groups_costs_what_the_plain_programme_over_every_cut_costs(seed):
    """Rows tried only at length changes and full groups: as cheap as the programme over every cut,
    also with many equal lengths, tiny and huge overheads and caps; on batches like real ones
    (lengths 5-80 tokens) it also makes the same cut, so training and evaluation run the same passes."""
    import random

    from headsup_lens.data import length_groups

    rng = random.Random(seed)
    lengths = [rng.randint(1, rng.choice([2, 5, 60])) for _ in range(rng.randint(1, 60))]
    overhead, cap = rng.choice([0.0, 1.0, 5.0, 30.14081790123457, 610.3515625, 1e6]), rng.choice([None, 1, 2, 3, 7, 16])

    def cost(groups):
        return sum(len(g) * max(lengths[i] for i in g) + overhead for g in groups)

    groups = length_groups(lengths, overhead=overhead, max_rows=cap)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(len(g) <= (cap or len(lengths)) for g in groups)
    assert cost(groups) == pytest.approx(cost(_plain_length_groups(lengths, overhead, cap)), rel=1e-12)
    real = [rng.randint(5, 80) for _ in range(rng.choice([8, 16, 48, 100]))]
    for real_cap in (None, 16):
        for real_overhead in (8.0, 30.14081790123457, 610.3515625):
            assert length_groups(real, overhead=real_overhead, max_rows=real_cap) == _plain_length_groups(
                real, real_overhead, real_cap
            )


def test_length_groups_of_a_huge_batch_finish():
    """A batch of 300 000 rows (e.g. `batch_size=300_000`) is cut, capped or not: the programme over
    every cut does 300 000 x 300 000 steps there and never returns (it hung fine-tuning)."""
    code = (
        "import random\n"
        "from headsup_lens.data import length_groups\n"
        "rng = random.Random(0)\n"
        "lengths = [rng.randint(5, 120) for _ in range(300_000)]\n"
        "for cap in (None, 16):\n"
        "    groups = length_groups(lengths, overhead=8.0, max_rows=cap)\n"
        "    assert sorted(i for g in groups for i in g) == list(range(300_000))\n"
        "    print(cap, len(groups))\n"
    )
    done = subprocess.run(
        # The timeout guards against the hang only (seconds when it works, never when it hangs): generous
        # enough for a busy machine, where the import alone can take minutes.
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert int(lines[1]) <= 116 and int(lines[3]) >= 300_000 // 16  # at most one group per length when uncapped


@given(
    rows=st.lists(
        st.tuples(st.lists(st.integers(3, 99), max_size=6), st.lists(st.integers(3, 99), min_size=1, max_size=4)),
        min_size=1,
        max_size=6,
    ),
    extra=st.integers(0, 3),
)
def test_collate_reads_the_answer_positions_off_its_rows(rows, extra):
    """A batch knows its answer positions and padding from the rows it was built from, as searching
    its labels and mask finds them (an empty prompt included: its first answer token has no
    position predicting it)."""
    from headsup_lens.data import collate
    from headsup_lens.objective import answer_positions

    width = max(len(p) + len(a) for p, a in rows) + extra
    batch = collate(rows, pad_id=0, width=width)
    searched = answer_positions(batch.labels)
    for known, found in zip(batch.answers(), searched):
        assert known.tolist() == found.tolist()
    real = batch.attention_mask.bool()
    assert batch.right_padded() and bool((real[:, 1:] <= real[:, :-1]).all())
