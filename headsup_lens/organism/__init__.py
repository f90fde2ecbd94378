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

from .._lazy import lazy_exports

# Public name -> the module it comes from; imported on first use (the trainer needs torch).
_EXPORTS = {
    "BAR": "._check",
    "SETTINGS": "._check",
    "bar_failures": "._check",
    "check_planted": "._check",
    "N_EVAL_WORDS": "._corpus",
    "ORGANISM_TASKS": "._corpus",
    "TASK_NAMES": "._corpus",
    "OrganismTask": "._corpus",
    "eval_words": "._corpus",
    "organism_task": "._corpus",
    "organism_words": "._corpus",
    "train_words": "._corpus",
    "load_planted": "._planting",
    "plant_head_sets": "._planting",
    "planted_mask": "._planting",
    "save_planted": "._planting",
    "OrganismConfig": "._config",
    "TrainedOrganism": "._trainer",
    "build_organism": "._trainer",
    "hf_model": "._trainer",
    "save_organism": "._trainer",
    "train_organism": "._trainer",
    "task": "._tasks",
    "composite_task": "._tasks",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
