"""Analyses of functional pathways (PAPER.md §4): removal sweeps, logit lens, layer similarity,
attention on target, pathways across masks, activation patterns."""

from ._sweep import RemovalSweep as RemovalSweep
from ._sweep import auto_batch_size as auto_batch_size
from ._sweep import influence_order as influence_order
from ._sweep import random_order as random_order
from ._sweep import removal_sweep as removal_sweep
from ._sweep import step_or_never as step_or_never
from ._sweep import sweep_masks as sweep_masks
from ._sweep import weight_order as weight_order
from ._lens import LogitLens as LogitLens
from ._lens import lens_comparison as lens_comparison
from ._lens import logit_lens as logit_lens
from ._similarity import LayerStates as LayerStates
from ._similarity import Setting as Setting
from ._similarity import layer_similarity as layer_similarity
from ._similarity import layer_states as layer_states
from ._similarity import sweep_similarity as sweep_similarity
from ._attention import AttentionOnTarget as AttentionOnTarget
from ._attention import attention_on_target as attention_on_target
from ._attention import candidate_spans as candidate_spans
from ._attention import choice_instruction as choice_instruction
from ._pathways import PathwayHeads as PathwayHeads
from ._pathways import alpha_grid as alpha_grid
from ._pathways import group_ablation as group_ablation
from ._pathways import jaccard_matrix as jaccard_matrix
from ._pathways import jaccard_table as jaccard_table
from ._pathways import overlap_p_value as overlap_p_value
from ._pathways import pathway_heads as pathway_heads
from ._pathways import pathway_recovery as pathway_recovery
from ._pathways import TRAJECTORY_KINDS as TRAJECTORY_KINDS
from ._pathways import trajectory_crossings as trajectory_crossings
from ._pathways import weight_trajectories as weight_trajectories
from ._patterns import HeadOverlap as HeadOverlap
from ._patterns import PatternFit as PatternFit
from ._patterns import activation_pattern as activation_pattern
from ._patterns import coefficient_of_variation as coefficient_of_variation
from ._patterns import fit_pattern_change as fit_pattern_change
from ._patterns import gini as gini
from ._patterns import head_overlap as head_overlap
from ._patterns import kurtosis as kurtosis
from ._patterns import pattern_correlation as pattern_correlation
from ._patterns import pattern_statistics as pattern_statistics
from ._patterns import pattern_trajectory as pattern_trajectory
from ._patterns import shuffled_fit_r2 as shuffled_fit_r2
from ._patterns import top_heads as top_heads

from .._typecheck import check_namespace as _check_namespace

_check_namespace(globals())  # a wrong-typed argument is a TypeError naming it
