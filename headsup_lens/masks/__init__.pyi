# The public names of `headsup_lens.masks`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._head_list import HeadList as HeadList
from ._head_list import read_head_list as read_head_list
from ._head_list import write_head_list as write_head_list
from ._head_mask import Head as Head
from ._head_mask import HeadMask as HeadMask
from ._head_mask import HeadSet as HeadSet
from ._head_mask import Shuffle as Shuffle
from ._head_mask import UnverifiedMaskWarning as UnverifiedMaskWarning
from ._head_mask import UnverifiedModelWarning as UnverifiedModelWarning
from ._head_mask import random_jaccard as random_jaccard
from ._node_graph import read_node_graph as read_node_graph
from ._node_graph import write_node_graph as write_node_graph
from ._reference import read_reference as read_reference
from ._reference import read_reference_checkpoints as read_reference_checkpoints
from ._reference import reference_logits as reference_logits
from ._reference import write_reference as write_reference
