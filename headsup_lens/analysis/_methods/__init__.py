"""Head-finding methods side by side: each scores every head, a registry picks one by name."""

from . import _ablation, _gradients, _learned, _soft_gate  # noqa: F401  (each registers its methods)
from ._base import ABLATIONS as ABLATIONS
from ._base import METHODS as METHODS
from ._base import HeadMethod as HeadMethod
from ._base import HeadScores as HeadScores
from ._base import head_scores as head_scores
from ._base import mask_losses as mask_losses
from ._base import mean_z as mean_z
from ._base import register_method as register_method
