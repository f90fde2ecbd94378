"""Translation metrics as the paper's evaluation code computes them, and the target-language share.

- `paper_rouge_l`: ROUGE-L F1 (rouge-score) of the whole generation against the reference, on the
  tokens of a subword tokenizer. The paper tokenises with bge-m3's (XLM-R SentencePiece) tokenizer,
  which no package ships; pass it as `tokenizer` when you have it (any object with `.tokenize`, e.g.
  a Hugging Face tokenizer). The default, `"13a+zh"`, is sacreBLEU's Chinese tokenizer: 13a tokens
  (case kept, punctuation split off) for Latin and Cyrillic text and one token per CJK character,
  the word-level counterpart of XLM-R's pieces (those split rare words further, which gives partial
  credit for partly right words; the documentation's results page on translation shows the effect on
  a sample).
- `paper_bleu`: Table 8's procedure: NLTK `sentence_bleu` (smoothing method 1) per example, 0-1,
  averaged over examples. Punctuation (`[^\\w\\s]`) is removed, spaces collapsed and the text
  segmented by jieba (every language); the reference keeps its second "\\n\\n" paragraph when it has
  several, and each "\\n\\n" paragraph of the generation is scored, the best one kept. The reference
  code hands NLTK strings, so the n-grams are *characters* (spaces included): `segmentation="characters"`
  is that; `"words"` splits on spaces (NLTK's intended word n-grams).
- `target_language_share`: the fraction of generations whose first line py3langid (its model ships
  in the package) identifies as the target language (not a metric of the paper).
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from rouge_score import rouge_scorer

from ._metrics import _check, check_texts, first_line

SEGMENTATIONS = ("characters", "words")
DEFAULT_ROUGE_TOKENIZER = "13a+zh"
PARTS = ("first_line", "whole")


@runtime_checkable
class Tokenizer(Protocol):
    def tokenize(self, text: str) -> list[str]: ...


class _SacrebleuZh:
    """sacreBLEU's `zh` tokenizer as rouge-score wants it: 13a tokens, CJK characters split apart."""

    def __init__(self) -> None:
        from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh  # deferred: loads on use

        self._tokenize = TokenizerZh()

    def tokenize(self, text: str) -> list[str]:
        return self._tokenize(text).split()


def _rouge_tokenizer(tokenizer: object) -> Tokenizer:
    if isinstance(tokenizer, str):
        if tokenizer != DEFAULT_ROUGE_TOKENIZER:
            raise ValueError(
                f"tokenizer must be {DEFAULT_ROUGE_TOKENIZER!r} or an object with .tokenize(text), not {tokenizer!r}"
            )
        return _SacrebleuZh()
    if not isinstance(tokenizer, Tokenizer):  # the protocol is runtime-checkable: a callable .tokenize
        raise ValueError(f"tokenizer must have a .tokenize(text) method, got {type(tokenizer).__name__}")
    return _CheckedTokenizer(tokenizer)


class _CheckedTokenizer:
    """A tokenizer whose every answer must be a list of strings: rouge-score would iterate a string's
    characters (or a tensor's ids) and give a plausible but wrong score."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    def tokenize(self, text: str) -> list[str]:
        tokens = self._tokenizer.tokenize(text)
        if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (list, tuple)):
            raise ValueError(
                f"tokenizer {type(self._tokenizer).__name__}.tokenize({text!r:.40}) must return a list of "
                f"strings (the tokens), got {type(tokens).__name__} {tokens!r:.60}"
            )
        for token in tokens:
            if not isinstance(token, str):
                raise ValueError(
                    f"tokenizer {type(self._tokenizer).__name__}.tokenize({text!r:.40}) must return a list of "
                    f"strings, got a {type(token).__name__} among them: {token!r:.40}"
                )
        return list(tokens)


def paper_rouge_l(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    tokenizer: str | Tokenizer = DEFAULT_ROUGE_TOKENIZER,
) -> float:
    """Mean ROUGE-L F1 of each whole generation against its reference (see the module docstring)."""
    return sum(paper_rouge_l_scores(predictions, references, tokenizer=tokenizer)) / len(predictions)


def paper_rouge_l_scores(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    tokenizer: str | Tokenizer = DEFAULT_ROUGE_TOKENIZER,
) -> list[float]:
    """ROUGE-L F1 of each generation (`paper_rouge_l` before the mean)."""
    _check(predictions, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_rouge_tokenizer(tokenizer))
    return [float(scorer.score(ref, pred)["rougeL"].fmeasure) for pred, ref in zip(predictions, references)]


@functools.cache
def _jieba():
    import jieba  # deferred: its import is slow

    jieba.setLogLevel(logging.WARNING)  # it logs its dictionary loading at INFO
    return jieba


def bleu_clean(text: str) -> str:
    """The reference code's post-processing: punctuation removed, spaces collapsed, jieba segments
    joined by spaces (jieba keeps the spaces between Latin words as tokens of their own)."""
    text = re.sub(r"\s+", " ", re.sub(r"[^\w\s]", "", text)).strip()
    return " ".join(_jieba().cut(text))


def bleu_reference(text: str) -> str:
    """The reference side: the second "\\n\\n" paragraph when there are more (the reference code
    treats the first as an echoed instruction), the rest otherwise; then `bleu_clean`."""
    parts = text.split("\n\n")
    if len(parts) > 2:
        parts = parts[1:2]
    elif len(parts) > 1:
        parts = parts[1:]
    return bleu_clean("\n\n".join(parts))


def _sentence_bleu(reference: str, hypothesis: str, segmentation: str) -> float:
    smoothing = SmoothingFunction().method1
    if segmentation == "words":
        score = sentence_bleu([reference.split()], hypothesis.split(), smoothing_function=smoothing)
    else:
        score = sentence_bleu([reference], hypothesis, smoothing_function=smoothing)  # pyright: ignore[reportArgumentType] (characters: nltk iterates the strings)
    return float(score)  # pyright: ignore[reportArgumentType] (nltk's annotation includes lists; one pair gives a float)


def paper_bleu_scores(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    segmentation: str = "characters",
) -> list[float]:
    """Table 8's BLEU of each generation (0-1): the best of its "\\n\\n" paragraphs."""

    _check(predictions, references)
    if segmentation not in SEGMENTATIONS:
        raise ValueError(f"segmentation must be one of {SEGMENTATIONS}, not {segmentation!r}")
    scores = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns on every hypothesis with no matching n-gram order
        for prediction, reference in zip(predictions, references):
            target = bleu_reference(reference)
            scores.append(
                max(_sentence_bleu(target, bleu_clean(part), segmentation) for part in prediction.split("\n\n"))
            )
    return scores


def paper_bleu(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    segmentation: str = "characters",
) -> float:
    """Mean over examples of Table 8's sentence BLEU, 0-1 (see the module docstring)."""
    return sum(paper_bleu_scores(predictions, references, segmentation=segmentation)) / len(predictions)


@functools.cache
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier  # deferred: loads on use

    return LanguageIdentifier.from_model_file(MODEL_FILE)


def identify_language(text: str) -> str | None:
    """The ISO 639-1 code py3langid gives `text` (its bundled model), None for blank text."""
    if not text.strip():
        return None
    return _identifier().classify(text)[0]


def target_language_share(generations: Sequence[str], language: str, *, part: str = "first_line") -> float:
    """Fraction of `generations` identified as `language` (an ISO 639-1 code such as "zh"); blank
    generations count as not in the target language. `part="first_line"` (default) identifies the
    first non-empty line, the translation proper: small models go on to comment on it in English
    ("In French, the phrase ... translates to ..."), which would outvote a right first line;
    `"whole"` identifies the whole generation."""
    check_texts("generations", generations)
    if not generations:
        raise ValueError("generations is empty")
    if language not in _identifier().nb_classes:
        raise ValueError(f"language must be one of py3langid's codes, not {language!r}")
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, not {part!r}")
    texts = [first_line(g) for g in generations] if part == "first_line" else list(generations)
    return sum(identify_language(t) == language for t in texts) / len(texts)
