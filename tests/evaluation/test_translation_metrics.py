"""The paper's translation metrics on hand-checked examples (Chinese included), and language share."""

from __future__ import annotations

import math

import pytest

from headsup_lens.evaluation import (
    identify_language,
    paper_bleu,
    paper_bleu_scores,
    paper_rouge_l,
    paper_rouge_l_scores,
    target_language_share,
)
from headsup_lens.evaluation._translation_metrics import bleu_clean, bleu_reference


# ----------------------------------------------------------------------------- ROUGE-L
def test_rouge_l_counts_case_and_punctuation_tokens():
    # tokens: The cat sat on the mat .  vs  The cat is on the mat .  -> LCS 6 of 7 on each side
    assert paper_rouge_l(["The cat sat on the mat."], ["The cat is on the mat."]) == pytest.approx(6 / 7)
    # case is kept (XLM-R pieces are cased): "the" does not match "The"
    assert paper_rouge_l(["the cat"], ["The cat"]) == pytest.approx(0.5)


def test_rouge_l_scores_the_whole_generation():
    # the second paragraph lowers precision: LCS 3, |pred| = 3 + 4 (In French : .), |ref| = 3
    score = paper_rouge_l(["Je suis là\n\nIn French : ."], ["Je suis là"])
    p, r = 3 / 7, 3 / 3
    assert score == pytest.approx(2 * p * r / (p + r))


def test_rouge_l_chinese_counts_characters_without_spaces():
    # 我 是 学 生 。 vs 我 是 老 师 。 -> LCS 3 of 5
    assert paper_rouge_l(["我是学生。"], ["我是老师。"]) == pytest.approx(3 / 5)
    assert paper_rouge_l_scores(["我是学生。", ""], ["我是学生。", "我"]) == [pytest.approx(1.0), 0.0]


def test_rouge_l_takes_a_subword_tokenizer():
    class Pieces:  # a stand-in for a SentencePiece tokenizer's .tokenize
        def tokenize(self, text):
            return [text[i : i + 2] for i in range(0, len(text), 2)]

    # "abcd" -> ab cd, "abce" -> ab ce: LCS 1 of 2
    assert paper_rouge_l(["abce"], ["abcd"], tokenizer=Pieces()) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="tokenizer"):
        paper_rouge_l(["a"], ["a"], tokenizer="bge-m3")
    with pytest.raises(ValueError, match="predictions"):
        paper_rouge_l(["a"], [])


class Returns:
    """A tokenizer whose .tokenize gives back `make(text)`."""

    def __init__(self, make):
        self.make = make

    def tokenize(self, text):
        return self.make(text)


@pytest.mark.parametrize(
    "make, got",
    [
        (lambda text: text, "got str 'the cat'"),  # would be scored on its characters
        (lambda text: text.encode(), "got bytes"),
        (lambda text: iter(text.split()), "got list_iterator"),
        (lambda text: [len(w) for w in text.split()], "got a int among them"),  # ids, not tokens
    ],
)
def test_a_tokenizer_that_does_not_return_a_list_of_strings_is_refused(make, got):
    with pytest.raises(
        ValueError, match=rf"tokenizer Returns.tokenize\('the cat'\) must return a list of strings.*{got}"
    ):
        paper_rouge_l_scores(["the cat sat"], ["the cat"], tokenizer=Returns(make))


def test_a_tokenizer_returning_a_tuple_of_strings_scores_its_tokens():
    # the cat sat vs the cat: LCS 2, precision 2/3, recall 1 -> F1 0.8 (its characters would give 0.9)
    assert paper_rouge_l(["the cat sat"], ["the cat"], tokenizer=Returns(lambda t: tuple(t.split()))) == pytest.approx(
        0.8
    )


# ----------------------------------------------------------------------------- BLEU (Table 8)
def test_bleu_clean_drops_punctuation_and_segments_with_jieba():
    assert bleu_clean("Hello,   world!") == "Hello   world"  # jieba keeps the space as a token of its own
    assert bleu_clean("我是学生。") == "我 是 学生"
    assert bleu_reference("instruction\n\nthe answer\n\nmore") == "the   answer"
    assert bleu_reference("first\n\nsecond") == "second"


def test_bleu_character_ngrams_hand_computed():
    # the reference code passes strings to NLTK: character n-grams. abce vs abcd:
    # p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0 -> 0.1 / 1 (smoothing method 1), brevity penalty 1
    expected = (3 / 4 * 2 / 3 * 1 / 2 * 0.1 / 1) ** 0.25
    assert paper_bleu(["abce"], ["abcd"]) == pytest.approx(expected)


def test_bleu_chinese_hand_computed():
    # jieba: 我 是 学生 / 我 是 老师 -> 6 characters each (spaces included):
    # p1 = 4/6, p2 = 3/5, p3 = 2/4, p4 = 1/3
    expected = (4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert paper_bleu(["我是老师。"], ["我是学生。"]) == pytest.approx(expected)
    assert paper_bleu(["我是学生"], ["我是学生！"]) == pytest.approx(1.0)


def test_bleu_keeps_the_best_paragraph_and_averages_examples():
    scores = paper_bleu_scores(["Sure! Here it is:\n\nHello, world.", "xyz"], ["Hello world", "Hello world"])
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] < 0.1
    assert paper_bleu(["Sure!\n\nHello world", "xyz"], ["Hello world"] * 2) == pytest.approx(sum(scores) / 2)


def test_bleu_word_segmentation_option():
    # words: the cat sat on the mat vs the cat is on the mat: p1 5/6, p2 3/5, p3 1/4, p4 0 -> 0.1/3
    expected = (5 / 6 * 3 / 5 * 1 / 4 * (0.1 / 3)) ** 0.25
    got = paper_bleu(["the cat sat on the mat"], ["the cat is on the mat"], segmentation="words")
    assert got == pytest.approx(expected)
    assert not math.isclose(got, paper_bleu(["the cat sat on the mat"], ["the cat is on the mat"]))
    with pytest.raises(ValueError, match="segmentation"):
        paper_bleu(["a"], ["a"], segmentation="bpe")


# ----------------------------------------------------------------------------- target-language share
def test_target_language_share_reads_the_first_line():
    outputs = [
        "Je ne sais pas ce qu'il a dit hier soir.\n\nIn French, the phrase means I do not know what he said.",
        "我不知道他昨天晚上说了什么。",
        "I do not know what he said last night.",
        "",
    ]
    assert [identify_language(o) for o in outputs[1:3]] == ["zh", "en"]
    assert identify_language("  ") is None
    assert target_language_share(outputs, "fr") == pytest.approx(1 / 4)
    assert target_language_share(outputs, "zh") == pytest.approx(1 / 4)
    assert target_language_share(outputs[:1], "fr", part="whole") == 0.0  # the English comment outweighs it
    with pytest.raises(ValueError, match="language"):
        target_language_share(outputs, "french")
    with pytest.raises(ValueError, match="part"):
        target_language_share(outputs, "fr", part="all")


# ----------------------------------------------------------------------------- the settings table
@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from headsup_lens import load_model

    from ..training.planted import build_planted_dir

    return load_model(build_planted_dir(tmp_path_factory.mktemp("planted")), device="cpu", dtype="float32")


def test_translation_tasks_always_get_the_paper_text_metrics(planted):
    import dataclasses

    from headsup_lens import HeadMask
    from headsup_lens.evaluation import EvalConfig, evaluate, generations

    from ..training.planted import planted_mask, planted_task

    plain = planted_task()
    task = dataclasses.replace(plain, target_language="zh")  # answers without spaces: one "word" each
    mask = HeadMask(planted_mask())
    assert "rouge_l" not in evaluate(planted, plain, mask).table
    table = evaluate(planted, task, mask).table.set_index("setting")
    assert {"rouge_l", "bleu", "target_language_share"} <= set(table.columns)
    texts = generations(planted, task, mask=mask)
    answers = [y for _, y in task.eval_pairs]
    assert table.loc["masked", "rouge_l"] == pytest.approx(paper_rouge_l(texts, answers))
    assert table.loc["masked", "bleu"] == pytest.approx(paper_bleu(texts, answers))
    assert table.loc["masked", "target_language_share"] == pytest.approx(target_language_share(texts, "zh"))
    old = evaluate(planted, task, mask, EvalConfig(text_style="first_line")).table
    assert {"rouge_l_first_line", "sacrebleu_first_line"} <= set(old.columns) and "bleu" not in old
    assert "rouge_l" not in evaluate(planted, task, mask, EvalConfig(text_metrics="off")).table
    with pytest.raises(TypeError, match="text_style"):
        EvalConfig(text_style="nltk")


def test_accuracy_uses_the_task_budget(planted, monkeypatch):
    import dataclasses

    from headsup_lens.evaluation import _answers, accuracy

    from ..training.planted import planted_task

    seen = []
    real = _answers.generate_answers
    monkeypatch.setattr(_answers, "generate_answers", lambda *a, **k: seen.append(k["max_new_tokens"]) or real(*a, **k))
    accuracy(planted, dataclasses.replace(planted_task(), max_new_tokens=50))
    accuracy(planted, planted_task(), max_new_tokens=3)
    assert seen == [50, 3]
