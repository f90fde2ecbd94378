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
from ._schedule import SCHEDULE_STEPS as SCHEDULE_STEPS
from ._schedule import ScheduleCurve as ScheduleCurve
from ._schedule import schedule_curve as schedule_curve
