"""Tasks: function-vector JSON, XNLI translation, IWSLT2017, few-shot; tokenisation with answer-only labels."""

from ._paths import ENV_VAR as ENV_VAR
from ._paths import data_dir as data_dir
from ._paths import default_data_dir as default_data_dir
from ._registry import load_task as load_task
from ._registry import register_task as register_task
from ._registry import task_names as task_names
from ._sources import FV_TASKS as FV_TASKS
from ._sources import LANGUAGES as LANGUAGES
from ._sources import fewshot as fewshot
from ._sources import function_vector_task as function_vector_task
from ._sources import hybrid_task as hybrid_task
from ._sources import iwslt_task as iwslt_task
from ._sources import read_pairs_json as read_pairs_json
from ._sources import translation_task as translation_task
from ._task import Task as Task
from ._tokenize import IGNORE_INDEX as IGNORE_INDEX
from ._tokenize import TaskBatch as TaskBatch
from ._tokenize import collate as collate
from ._tokenize import encode_example as encode_example
from ._tokenize import encode_pairs as encode_pairs
from ._tokenize import encode_prompt as encode_prompt
from ._tokenize import length_groups as length_groups
from ._tokenize import render_prompt as render_prompt
from ._tokenize import task_prompts as task_prompts
from ._tokenize import tokenize_pairs as tokenize_pairs
from ._tokenize import tokenize_task as tokenize_task
