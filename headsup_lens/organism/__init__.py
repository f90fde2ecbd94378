"""The built-in model organism with planted functional pathways.

A small Llama (8 layers x 16 heads) trained here from scratch on a synthetic chat corpus of eight
word tasks. Without an instruction it echoes the word; with an instruction it performs the task;
and it was trained so that removing a fixed, task-specific head set S_t (its *planted pathway*,
saved in `weights/planted.json`) makes it perform task t without instruction. The pathways are
planted, not natural: the organism demonstrates and validates the tooling offline, while the
paper's claim about natural LLMs is tested on real LLMs.

    import headsup_lens as hl
    model = hl.load_model("organism")
    table = hl.organism.check_planted(model)      # accuracy per task: original, planted, random, instructed
    mask = hl.organism.planted_mask(hl.organism.load_planted(), "organism/reverse", model)
"""

from ._check import BAR as BAR
from ._check import SETTINGS as SETTINGS
from ._check import bar_failures as bar_failures
from ._check import check_planted as check_planted
from ._corpus import N_EVAL_WORDS as N_EVAL_WORDS
from ._corpus import ORGANISM_TASKS as ORGANISM_TASKS
from ._corpus import TASK_NAMES as TASK_NAMES
from ._corpus import OrganismTask as OrganismTask
from ._corpus import eval_words as eval_words
from ._corpus import organism_task as organism_task
from ._corpus import organism_words as organism_words
from ._corpus import train_words as train_words
from ._planting import load_planted as load_planted
from ._planting import plant_head_sets as plant_head_sets
from ._planting import planted_mask as planted_mask
from ._planting import save_planted as save_planted
from ._trainer import OrganismConfig as OrganismConfig
from ._trainer import TrainedOrganism as TrainedOrganism
from ._trainer import build_organism as build_organism
from ._trainer import hf_model as hf_model
from ._trainer import save_organism as save_organism
from ._trainer import train_organism as train_organism
from ._tasks import task as task
