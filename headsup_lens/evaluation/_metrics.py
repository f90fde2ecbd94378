"""Generation metrics from maintained libraries: ROUGE-L (rouge-score) and BLEU (sacrebleu)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import sacrebleu
from rouge_score import rouge_scorer

from .._validate import check_sequence, describe


class _Words:
    """Lower-cased Unicode words: rouge-score's default tokenizer drops every non-ASCII letter."""

    def tokenize(self, text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())


class _Characters:
    """Non-space characters: Chinese has no spaces between words, so ROUGE counts characters."""

    def tokenize(self, text: str) -> list[str]:
        return [c for c in text if not c.isspace()]


def check_texts(name: str, texts: Sequence[str]) -> None:
    """`texts` must be a list or tuple of strings: one string is a TypeError (it would be scored
    character by character), as is any item that is not a string (named by its index)."""
    check_sequence(name, texts, item="string")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] must be a string, got {describe(text)} ({type(text).__name__})")


def _check(predictions: Sequence[str], references: Sequence[str]) -> None:
    check_texts("predictions", predictions)
    check_texts("references", references)
    if len(predictions) != len(references) or not predictions:
        raise ValueError(
            f"need equally many predictions and references (at least one), got {len(predictions)} and {len(references)}"
        )


def rouge_l(predictions: Sequence[str], references: Sequence[str], *, char_level: bool = False) -> float:
    """Mean ROUGE-L F1 of each prediction against its reference (character tokens when `char_level`)."""
    _check(predictions, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Characters() if char_level else _Words())
    scores = [scorer.score(ref, pred)["rougeL"].fmeasure for pred, ref in zip(predictions, references)]
    return sum(scores) / len(scores)


def bleu(predictions: Sequence[str], references: Sequence[str], *, char_level: bool = False) -> float:
    """Corpus BLEU (sacrebleu; its Chinese tokenizer when `char_level`), on a 0-100 scale."""
    _check(predictions, references)
    return float(
        sacrebleu.corpus_bleu(list(predictions), [list(references)], tokenize="zh" if char_level else "13a").score
    )


def first_line(text: str) -> str:
    """The translation proper: the first non-empty line (drops explanations that follow it)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
