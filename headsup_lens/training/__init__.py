"""Mask training: Gumbel-sigmoid straight-through logits with the paper's schedules."""

from ._config import TrainConfig as TrainConfig
from ._objective import answer_logits as answer_logits
from ._objective import answer_nll as answer_nll
from ._train import TrainResult as TrainResult
from ._train import left_tail_gumbel as left_tail_gumbel
from ._train import load_trajectory as load_trajectory
from ._train import safe_name as safe_name
from ._train import straight_through as straight_through
from ._train import train_mask as train_mask
from ._train import train_masks as train_masks
