# The public names of `headsup_lens.sft`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._finetune import FinetuneConfig as FinetuneConfig
from ._finetune import FinetuneResult as FinetuneResult
from ._finetune import add_lora_ as add_lora_
from ._finetune import finetune_ as finetune_
from ._finetune import pattern_subset as pattern_subset
from ._finetune import remove_lora_ as remove_lora_
from ._selection import CONDITIONS as CONDITIONS
from ._selection import PAIRED as PAIRED
from ._selection import SelectionConfig as SelectionConfig
from ._selection import SelectionResult as SelectionResult
from ._selection import SelectionRun as SelectionRun
from ._selection import composite_components as composite_components
from ._selection import data_selection as data_selection
from ._selection import random_sources as random_sources
from ._selection import reloading as reloading
from ._selection import selection_plan as selection_plan
from ._selection import selection_summary as selection_summary
from ._selection import similarity_vs_loss as similarity_vs_loss
from ._study import change_consistency as change_consistency
from ._study import composition_fits as composition_fits
from ._study import held_out_outputs as held_out_outputs
from ._study import input_overlap as input_overlap
from ._study import mask_overlap as mask_overlap
from ._study import pattern_changes as pattern_changes
from ._study import pattern_dynamics as pattern_dynamics
from ._study import run_changes as run_changes
from ._study import run_tables as run_tables
from ._study import statistic_changes as statistic_changes
from ._study import statistics_before_after as statistics_before_after
from ._study import task_grouping as task_grouping
