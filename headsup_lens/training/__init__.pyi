# The public names of `headsup_lens.training`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._advice import TrainingAdvice as TrainingAdvice
from ._config import TrainConfig as TrainConfig
from ._estimate import seconds_per_step as seconds_per_step
from ._gumbel import left_tail_gumbel as left_tail_gumbel
from ._gumbel import straight_through as straight_through
from ._loop import BatchSampler as BatchSampler
from ._loop import StepCallback as StepCallback
from ._loop import StepEnd as StepEnd
from ._loop import StepTimer as StepTimer
from ._loop import check_finite_loss as check_finite_loss
from ._loop import load_state as load_state
from ._loop import run_steps as run_steps
from ._loop import save_state as save_state
from ._schedule import warmup_cosine as warmup_cosine
from ._train import TrainResult as TrainResult
from ._train import load_trajectory as load_trajectory
from ._train import resume_step as resume_step
from ._train import safe_name as safe_name
from ._train import train_mask as train_mask
from ._train import train_masks as train_masks
