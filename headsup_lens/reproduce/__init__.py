"""Reproduction of the paper's tables and figures: what the scripts in `experiments/` share.

Named for what it is for, reproducing the paper's artifacts (one script each), and not `experiments`,
which is the folder of the scripts themselves. It sits above `plots` (it writes figures) and below
`demo` and `cli` (which may use it). A script is a short file: its options (a dataclass extending
`ExperimentOptions`, read like the CLI's) and `run(xp, options)`, called by `run_script`. `Experiment`
loads the model, resolves the tasks, finds or trains the learned masks (`cached_masks`: one cache
keyed by the training recipe and the model fingerprint) and writes tables and figures to
`<out>/<model>/` through the folder lock and one all-or-nothing output set per run; the folder
records its model (`model.json`) and refuses another's; those are the public names, for any study.
The multi-step procedures of the paper's artifacts live here too, tested, in private modules that the
scripts import from directly: Table 3's few-shot and hybrid rows (`fewshot_rows`,
`fewshot_summary`), the resumable comparison of head-finding methods (`compare_methods_on_tasks`),
the real-model stages over stored masks (`select_tasks`, `train_stored_masks`, `settings_table`,
`analyze_task`, `combine_tables`, ...), the translation stages (`scan_translation`, `table1_rows`,
`fig2_sweeps`, `table8_rows`), the SFT paper's stages (`sft_organism`, `sft_smollm2`,
`sft_selection`) and the comparison of a baked mask outside the toolkit (`bake_comparison`).
"""

import lazy_loader as _lazy_loader

__getattr__, __dir__, __all__ = _lazy_loader.attach_stub(__name__, __file__)
