# The public names of `headsup_lens.data`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._paths import ENV_VAR as ENV_VAR
from ._paths import data_dir as data_dir
from ._paths import default_data_dir as default_data_dir
from ._registry import load_task as load_task
from ._registry import register_task as register_task
from ._registry import task_names as task_names
from ._sources import CHAR_LEVEL_LANGUAGES as CHAR_LEVEL_LANGUAGES
from ._sources import FEWSHOT_SEED as FEWSHOT_SEED
from ._sources import FV_TASKS as FV_TASKS
from ._sources import HYBRID_UNSEEN as HYBRID_UNSEEN
from ._sources import LANGUAGES as LANGUAGES
from ._sources import fewshot as fewshot
from ._sources import function_vector_task as function_vector_task
from ._sources import hybrid_task as hybrid_task
from ._sources import iwslt_task as iwslt_task
from ._sources import read_pairs_file as read_pairs_file
from ._sources import read_pairs_json as read_pairs_json
from ._sources import read_task_file as read_task_file
from ._sources import task_from_file as task_from_file
from ._sources import task_mixture as task_mixture
from ._sources import translation_task as translation_task
from ._task import Task as Task
from ._tokenize import IGNORE_INDEX as IGNORE_INDEX
from ._tokenize import EncodedSplit as EncodedSplit
from ._tokenize import TaskBatch as TaskBatch
from ._tokenize import collate as collate
from ._tokenize import encode_example as encode_example
from ._tokenize import encode_pairs as encode_pairs
from ._tokenize import encode_prompt as encode_prompt
from ._tokenize import encode_split as encode_split
from ._tokenize import length_groups as length_groups
from ._tokenize import render_prompt as render_prompt
from ._tokenize import task_prompts as task_prompts
from ._tokenize import tokenize_pairs as tokenize_pairs
from ._tokenize import tokenize_task as tokenize_task
