"""`tidal-lower-to-scf`: replace every tidal op by scf/tensor IR using its registered rule.

Each op's rule lives in this package, one module per op (`scan.py`, ...), attached to the op's
registration entry under the `lower-to-scf` transformation.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects import declare_transformation, region_op_names
from tidal.passes.registry import tidal_pass

LOWER_TO_SCF = declare_transformation(
    "lower-to-scf", "tidal op -> scf.if/scf.while/scf.for on builtin tensors, the CPU path"
)

# The per-op modules attach their rules to LOWER_TO_SCF, so they load after it exists.
from tidal.conversion.tidal_to_scf import associative_scan, cond, map, scan, while_loop  # noqa: E402,F401


@tidal_pass("tidal-lower-to-scf", "Lower tidal ops to scf.if/scf.while/scf.for (CPU path; builtin tensors)")
def lower_to_scf(module_op):
    names = set(region_op_names())
    ops: list[ir.Operation] = []

    def collect(op):
        if op.name in names:
            ops.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(collect)  # post-order: inner ops come before the ops that contain them
    for op in ops:
        LOWER_TO_SCF.rule_for(op)(op)
