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
    task = hl.load_task("organism/reverse")          # the organism's tasks are ordinary tasks
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # what the type checker sees; at run time `_lazy` imports each name on first use
    from ..data._organism import N_EVAL_WORDS as N_EVAL_WORDS
    from ..data._organism import ORGANISM_TASKS as ORGANISM_TASKS
    from ..data._organism import TASK_NAMES as TASK_NAMES
    from ..data._organism import OrganismTask as OrganismTask
    from ..data._organism import eval_words as eval_words
    from ..data._organism import organism_words as organism_words
    from ..data._organism import train_words as train_words
    from ._check import BAR as BAR
    from ._check import CHECK_SETTINGS as CHECK_SETTINGS
    from ._check import bar_failures as bar_failures
    from ._check import check_planted as check_planted
    from ._config import OrganismConfig as OrganismConfig
    from ._planting import load_planted as load_planted
    from ._planting import plant_head_sets as plant_head_sets
    from ._planting import planted_mask as planted_mask
    from ._planting import save_planted as save_planted
    from ._trainer import TrainedOrganism as TrainedOrganism
    from ._trainer import build_organism as build_organism
    from ._trainer import save_organism as save_organism
    from ._trainer import train_organism as train_organism

# Public name -> the module it comes from; imported on first use (the trainer needs torch). The
# organism's tasks are ordinary tasks: `hl.load_task("organism/reverse")`.
_EXPORTS = {
    "BAR": "._check",
    "CHECK_SETTINGS": "._check",
    "bar_failures": "._check",
    "check_planted": "._check",
    "load_planted": "._planting",
    "plant_head_sets": "._planting",
    "planted_mask": "._planting",
    "save_planted": "._planting",
    "OrganismConfig": "._config",
    "TrainedOrganism": "._trainer",
    "build_organism": "._trainer",
    "save_organism": "._trainer",
    "train_organism": "._trainer",
    "N_EVAL_WORDS": "..data._organism",
    "ORGANISM_TASKS": "..data._organism",
    "OrganismTask": "..data._organism",
    "TASK_NAMES": "..data._organism",
    "eval_words": "..data._organism",
    "organism_words": "..data._organism",
    "train_words": "..data._organism",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "BAR",
    "CHECK_SETTINGS",
    "N_EVAL_WORDS",
    "ORGANISM_TASKS",
    "TASK_NAMES",
    "OrganismConfig",
    "OrganismTask",
    "TrainedOrganism",
    "bar_failures",
    "build_organism",
    "check_planted",
    "eval_words",
    "load_planted",
    "organism_words",
    "plant_head_sets",
    "planted_mask",
    "save_organism",
    "save_planted",
    "train_organism",
    "train_words",
]
