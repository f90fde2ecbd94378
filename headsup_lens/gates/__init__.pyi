# The public names of `headsup_lens.gates`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._bake import bake as bake
from ._dispatch import Gate as Gate
from ._dispatch import GatedOptions as GatedOptions
from ._dispatch import gate_hooks as gate_hooks
from ._dispatch import gated as gated
from ._masks import MaskLike as MaskLike
from ._native import native_options as native_options
from ._paths import GateSpec as GateSpec
from ._paths import direct_path as direct_path
from ._query import query_gate as query_gate
from ._query import query_gate_hooks as query_gate_hooks
from ._query import verify_query_gate as verify_query_gate
from ._registry import GATES as GATES
from ._registry import GateKind as GateKind
from ._registry import check_gate as check_gate
from ._registry import gate_kind as gate_kind
from ._registry import register_gate as register_gate
from ._registry import unregister_gate as unregister_gate
from ._value import ValueGateOptions as ValueGateOptions
from ._value import value_gate as value_gate
from ._value import value_gate_hooks as value_gate_hooks
