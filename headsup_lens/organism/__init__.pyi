# The public names of `headsup_lens.organism`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._check import BAR as BAR
from ._check import CHECK_SETTINGS as CHECK_SETTINGS
from ._check import bar_failures as bar_failures
from ._check import check_planted as check_planted
from ._config import OrganismConfig as OrganismConfig
from ._planting import load_planted as load_planted
from ._planting import plant_head_sets as plant_head_sets
from ._planting import planted_mask as planted_mask
from ._planting import save_planted as save_planted
from ._tasks import N_EVAL_WORDS as N_EVAL_WORDS
from ._tasks import ORGANISM_TASKS as ORGANISM_TASKS
from ._tasks import TASK_NAMES as TASK_NAMES
from ._tasks import OrganismTask as OrganismTask
from ._tasks import eval_words as eval_words
from ._tasks import organism_words as organism_words
from ._tasks import train_words as train_words
from ._trainer import TrainedOrganism as TrainedOrganism
from ._trainer import build_organism as build_organism
from ._trainer import save_organism as save_organism
from ._trainer import train_organism as train_organism
