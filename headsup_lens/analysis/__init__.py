"""Analyses of functional pathways (PAPER.md §4): removal sweeps, logit lens, layer similarity,
attention on target, pathways across masks, activation patterns."""

from ._sweep import RemovalSweep as RemovalSweep
from ._sweep import auto_batch_size as auto_batch_size
from ._sweep import influence_order as influence_order
from ._sweep import random_order as random_order
from ._sweep import removal_sweep as removal_sweep
from ._sweep import sweep_masks as sweep_masks
from ._sweep import weight_order as weight_order
from ._lens import LogitLens as LogitLens
from ._lens import logit_lens as logit_lens
from ._similarity import LayerStates as LayerStates
from ._similarity import Setting as Setting
from ._similarity import layer_similarity as layer_similarity
from ._similarity import layer_states as layer_states
from ._similarity import sweep_similarity as sweep_similarity
