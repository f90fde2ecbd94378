# The public names of `headsup_lens.reproduce`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.
# The paper's own stages (tables, figures, the SFT and translation studies) stay in the private modules,
# imported by the scripts of `experiments/` from there.

from ._experiment import MODEL_RECORD as MODEL_RECORD
from ._experiment import Experiment as Experiment
from ._experiment import check_model_record as check_model_record
from ._experiment import check_options as check_options
from ._experiment import model_slug as model_slug
from ._experiment import open_experiment as open_experiment
from ._experiment import output_root as output_root
from ._experiment import record_time as record_time
from ._experiment import run_script as run_script
from ._masks import TrainedMask as TrainedMask
from ._masks import cached_masks as cached_masks
from ._masks import mask_cache as mask_cache
from ._masks import stored_mask_path as stored_mask_path
from ._masks import weights_id as weights_id
from ._options import ExperimentOptions as ExperimentOptions
from ._options import MultiTaskOptions as MultiTaskOptions
from ._verdicts import claim_verdicts as claim_verdicts
from ._verdicts import nearest_plan as nearest_plan
