"""The tidal dialect: region ops for PyTorch's control-flow operators.

Importing this package registers every op (one module per op, each ending in its registration
entry). `verify_module` checks them all. The dialect knows no target: transformations attach
their per-op rules from their own packages (`declare_transformation`, `Transformation.rule`).
"""

from tidal.dialects import aten_call, associative_scan, cond, map, parallelism, scan, while_loop  # noqa: F401  (register)
from tidal.dialects.build import build_yield
from tidal.dialects.registry import (
    YIELD,
    OpEntry,
    Transformation,
    all_ops,
    all_transformations,
    declare_transformation,
    op_entry,
    op_names,
    region_op_names,
)
from tidal.dialects.verifier import check_module, verify_module

__all__ = [
    "YIELD",
    "OpEntry",
    "Transformation",
    "all_ops",
    "all_transformations",
    "build_yield",
    "check_module",
    "declare_transformation",
    "op_entry",
    "op_names",
    "region_op_names",
    "verify_module",
]
