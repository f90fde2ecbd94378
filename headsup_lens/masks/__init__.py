"""Head masks: the central object of the toolkit."""

from ._head_mask import Head as Head
from ._head_mask import HeadMask as HeadMask
from ._head_mask import UnverifiedMaskWarning as UnverifiedMaskWarning
from ._head_mask import UnverifiedModelWarning as UnverifiedModelWarning
from ._head_mask import expected_jaccard as expected_jaccard

from .._typecheck import check_namespace as _check_namespace

_check_namespace(globals())  # a wrong-typed argument is a TypeError naming it
