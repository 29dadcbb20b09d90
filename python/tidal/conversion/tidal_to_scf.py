"""`tidal-lower-to-scf`: replace every tidal op by scf/tensor IR using its registered rule."""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects import region_op_names, rules_for
from tidal.passes.registry import tidal_pass


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
        rules_for(op.name).lower_to_scf(op)
