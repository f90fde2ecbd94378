"""Evaluation: answer loss and perplexity, greedy accuracy (the paper's matcher and a strict one, with
Wilson intervals, echo and label controls, paired tests), ROUGE-L, BLEU, and the paper's settings table
(`evaluate`, its settings registry `SETTINGS`, `rescore` of stored outputs, the schedule curve)."""

from ._answers import accuracy as accuracy
from ._answers import answer_loss as answer_loss
from ._answers import answer_nll_per_example as answer_nll_per_example
from ._answers import generate_answers as generate_answers
from ._answers import generations as generations
from ._config import EvalConfig as EvalConfig
from ._evaluate import evaluate as evaluate
from ._metrics import bleu as bleu
from ._metrics import first_line as first_line
from ._metrics import rouge_l as rouge_l
from ._schedule import SCHEDULE_STEPS as SCHEDULE_STEPS
from ._schedule import ScheduleCurve as ScheduleCurve
from ._schedule import check_run_model as check_run_model
from ._schedule import schedule_curve as schedule_curve
from ._scoring import Labels as Labels
from ._scoring import balanced_accuracy as balanced_accuracy
from ._scoring import is_echo as is_echo
from ._scoring import is_empty as is_empty
from ._scoring import is_strict as is_strict
from ._scoring import mcnemar_exact as mcnemar_exact
from ._scoring import normalize as normalize
from ._scoring import score_outputs as score_outputs
from ._scoring import task_labels as task_labels
from ._scoring import wilson_interval as wilson_interval
from ._settings import CONTROLS as CONTROLS
from ._settings import MASK_SETTINGS as MASK_SETTINGS
from ._settings import REFERENCE_SETTINGS as REFERENCE_SETTINGS
from ._settings import SETTINGS as SETTINGS
from ._settings import EvalSetting as EvalSetting
from ._settings import register_setting as register_setting
from ._settings import setting_of as setting_of
from ._table import Evaluation as Evaluation
from ._table import rescore as rescore
from ._translation_metrics import identify_language as identify_language
from ._translation_metrics import paper_bleu as paper_bleu
from ._translation_metrics import paper_bleu_scores as paper_bleu_scores
from ._translation_metrics import paper_rouge_l as paper_rouge_l
from ._translation_metrics import paper_rouge_l_scores as paper_rouge_l_scores
from ._translation_metrics import target_language_share as target_language_share
