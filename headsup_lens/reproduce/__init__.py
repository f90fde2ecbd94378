"""Reproduction of the paper's tables and figures: what the scripts in `experiments/` share.

Named for what it is for, reproducing the paper's artifacts (one script each), and not `experiments`,
which is the folder of the scripts themselves. It sits above `plots` (it writes figures) and below
`demo` and `cli` (which may use it). A script is a short file: its options (a dataclass extending
`ExperimentOptions`, read like the CLI's) and `run(xp, options)`, called by `run_script`. `Experiment`
loads the model, resolves the tasks, finds or trains the learned masks (`cached_masks`: one cache
keyed by the training recipe and the model fingerprint) and writes tables and figures to
`<out>/<model>/` through the folder lock and one all-or-nothing output set per run; the folder
records its model (`model.json`) and refuses another's. The multi-step procedures of some
artifacts live here too, tested: Table 3's few-shot and hybrid rows (`fewshot_rows`,
`fewshot_summary`), the resumable comparison of head-finding methods (`compare_methods_on_tasks`),
the real-model stages over stored masks (`select_tasks`, `train_stored_masks`, `settings_table`,
`analyze_task`, `combine_tables`, ...), the translation stages (`scan_translation`, `table1_rows`,
`fig2_sweeps`, `table8_rows`), the SFT paper's stages (`sft_organism`, `sft_smollm2`,
`sft_selection`) and the comparison of a baked mask outside the toolkit (`bake_comparison`).
"""

from ._bake import agreement as agreement
from ._bake import bake_comparison as bake_comparison
from ._bake import llama_cpp_greedy as llama_cpp_greedy
from ._bake import plain_greedy as plain_greedy
from ._bake import timed_bake as timed_bake
from ._experiment import MODEL_RECORD as MODEL_RECORD
from ._experiment import Experiment as Experiment
from ._experiment import check_model_record as check_model_record
from ._experiment import check_options as check_options
from ._experiment import model_slug as model_slug
from ._experiment import open_experiment as open_experiment
from ._experiment import output_root as output_root
from ._experiment import record_time as record_time
from ._experiment import run_script as run_script
from ._fewshot import HYBRID_FILE as HYBRID_FILE
from ._fewshot import fewshot_hybrid_task as fewshot_hybrid_task
from ._fewshot import fewshot_rows as fewshot_rows
from ._fewshot import fewshot_summary as fewshot_summary
from ._fewshot import fewshot_task_names as fewshot_task_names
from ._fewshot import load_parts as load_parts
from ._fewshot import part_stem as part_stem
from ._fewshot import rows_key as rows_key
from ._fewshot import save_part as save_part
from ._masks import TrainedMask as TrainedMask
from ._masks import cached_masks as cached_masks
from ._masks import mask_cache as mask_cache
from ._masks import stored_mask_path as stored_mask_path
from ._masks import weights_id as weights_id
from ._methods import MethodsRun as MethodsRun
from ._methods import auroc_table as auroc_table
from ._methods import compare_methods_on_tasks as compare_methods_on_tasks
from ._methods import learned_rankings as learned_rankings
from ._methods import ranking_table as ranking_table
from ._options import DEFAULT_ORGANISM_TASKS as DEFAULT_ORGANISM_TASKS
from ._options import ORGANISM_TASK as ORGANISM_TASK
from ._options import ExperimentOptions as ExperimentOptions
from ._options import MultiTaskOptions as MultiTaskOptions
from ._sft import sft_grouping as sft_grouping
from ._sft import sft_organism as sft_organism
from ._sft import sft_selection as sft_selection
from ._sft import sft_smollm2 as sft_smollm2
from ._sft import sft_time as sft_time
from ._sft import write_sft_run as write_sft_run
from ._staged import SUMMARY_SETTINGS as SUMMARY_SETTINGS
from ._staged import TEXT_COLUMNS as TEXT_COLUMNS
from ._staged import add_seed_rows as add_seed_rows
from ._staged import analyze_task as analyze_task
from ._staged import combine_tables as combine_tables
from ._staged import rescore_stored as rescore_stored
from ._staged import seed0_tasks as seed0_tasks
from ._staged import seed_masks as seed_masks
from ._staged import select_tasks as select_tasks
from ._staged import selection_markdown as selection_markdown
from ._staged import selection_table as selection_table
from ._staged import settings_table as settings_table
from ._staged import summary_markdown as summary_markdown
from ._staged import train_stored_masks as train_stored_masks
from ._translation import ECHO as ECHO
from ._translation import PAPER_TABLE8_ALPHA as PAPER_TABLE8_ALPHA
from ._translation import SCAN_TARGETS as SCAN_TARGETS
from ._translation import fig2_sweeps as fig2_sweeps
from ._translation import scan_summary as scan_summary
from ._translation import scan_translation as scan_translation
from ._translation import setting_names as setting_names
from ._translation import table1_rows as table1_rows
from ._translation import table8_rows as table8_rows
from ._translation import train_translation_masks as train_translation_masks
from ._translation import translation_mask_name as translation_mask_name
