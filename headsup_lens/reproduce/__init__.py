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
`fewshot_summary`) and the resumable comparison of head-finding methods (`compare_methods_on_tasks`).
"""

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
