"""The objective both training and evaluation stand on: the answer-token loss (unembedding only the
answer positions) with length-grouped passes, and greedy decoding with the KV cache (unembedding only
the last position, rows leaving the batch at their stop token)."""

from ._answer import answer_logits as answer_logits
from ._answer import answer_nll as answer_nll
from ._answer import answer_positions as answer_positions
from ._answer import length_batches as length_batches
from ._greedy import GreedyOutput as GreedyOutput
from ._greedy import greedy_generate as greedy_generate
