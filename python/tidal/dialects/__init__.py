"""The tidal dialect: region ops for PyTorch's control-flow operators.

Importing this package registers every op (one module per op, each ending in its registration
entry). `verify_module` checks them all.
"""

from tidal.dialects import associative_scan, cond, map, scan, while_loop  # noqa: F401  (register)
from tidal.dialects.build import build_yield
from tidal.dialects.registry import YIELD, OpRules, all_rules, region_op_names, rules_for
from tidal.dialects.verifier import check_module, verify_module

__all__ = [
    "YIELD",
    "OpRules",
    "all_rules",
    "build_yield",
    "check_module",
    "region_op_names",
    "rules_for",
    "verify_module",
]
