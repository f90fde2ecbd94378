"""The organism's word tasks, defined with the other tasks (`data`) and listed here too."""

from ..data._organism import N_EVAL_WORDS as N_EVAL_WORDS
from ..data._organism import ORGANISM_TASKS as ORGANISM_TASKS
from ..data._organism import TASK_NAMES as TASK_NAMES
from ..data._organism import OrganismTask as OrganismTask
from ..data._organism import eval_words as eval_words
from ..data._organism import organism_words as organism_words
from ..data._organism import train_words as train_words
