# The public names of `headsup_lens.plots`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._heads import alpha_figure as alpha_figure
from ._heads import attention_target_figure as attention_target_figure
from ._heads import cross_task_figure as cross_task_figure
from ._heads import head_heatmap as head_heatmap
from ._heads import jaccard_figure as jaccard_figure
from ._heads import mask_heatmap as mask_heatmap
from ._heads import trajectory_figure as trajectory_figure
from ._heads import usage_heatmap as usage_heatmap
from ._methods import auroc_table_figure as auroc_table_figure
from ._methods import elicitation_figure as elicitation_figure
from ._methods import roc_figure as roc_figure
from ._runs import generation_table as generation_table
from ._runs import logit_figure as logit_figure
from ._runs import logit_lens_figure as logit_lens_figure
from ._runs import rank_figure as rank_figure
from ._runs import similarity_figure as similarity_figure
from ._runs import sweep_similarity_figure as sweep_similarity_figure
from ._save import SavedFigure as SavedFigure
from ._save import save_figure as save_figure
from ._save import save_table as save_table
from ._schedule import schedule_curve_figure as schedule_curve_figure
from ._sft import change_correlation_figure as change_correlation_figure
from ._sft import data_selection_figure as data_selection_figure
from ._sft import pattern_dynamics_figure as pattern_dynamics_figure
