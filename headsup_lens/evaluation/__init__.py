"""Evaluation: answer loss and perplexity, greedy accuracy, ROUGE-L, BLEU, and the paper's settings table."""

from ._evaluate import accuracy as accuracy
from ._evaluate import answer_loss as answer_loss
from ._evaluate import evaluate as evaluate
from ._evaluate import generate_answers as generate_answers
from ._evaluate import generations as generations
from ._metrics import bleu as bleu
from ._metrics import first_line as first_line
from ._metrics import rouge_l as rouge_l
from ._greedy import greedy_generate as greedy_generate
from ._translation_metrics import identify_language as identify_language
from ._translation_metrics import paper_bleu as paper_bleu
from ._translation_metrics import paper_bleu_scores as paper_bleu_scores
from ._translation_metrics import paper_rouge_l as paper_rouge_l
from ._translation_metrics import paper_rouge_l_scores as paper_rouge_l_scores
from ._translation_metrics import target_language_share as target_language_share
