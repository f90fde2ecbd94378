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

from .._lazy import lazy_exports

# Public name -> the module it comes from; imported on first use (the trainer needs torch). The
# organism's tasks are ordinary tasks: `hl.load_task("organism/reverse")`.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BAR": "._check",
        "SETTINGS": "._check",
        "bar_failures": "._check",
        "check_planted": "._check",
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
        "N_EVAL_WORDS": "..data._organism",
        "ORGANISM_TASKS": "..data._organism",
        "OrganismTask": "..data._organism",
        "TASK_NAMES": "..data._organism",
        "eval_words": "..data._organism",
        "organism_words": "..data._organism",
        "train_words": "..data._organism",
    },
)
__all__ = __dir__()
