# The public names of `headsup_lens.objective`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._answer import answer_logits as answer_logits
from ._answer import answer_nll as answer_nll
from ._answer import answer_positions as answer_positions
from ._answer import length_batches as length_batches
from ._greedy import GreedyOutput as GreedyOutput
from ._greedy import greedy_generate as greedy_generate
