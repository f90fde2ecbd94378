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

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
