"""`tidal.cond` → `scf.if`."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf, tensor

from tidal.conversion.scf_builders import anchor_at_end, inline_body, replace_op
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.cond")
def lower_cond_to_scf(op):
    """`scf.if` on the predicate's scalar; each branch's body is inlined with its operands."""
    pred, *operands = list(op.operands)
    with ir.InsertionPoint(op), op.location:
        flag = tensor.extract(pred, [])
        if_op = scf.IfOp(flag, [r.type for r in op.results], has_else=True)
        for region, block in ((op.regions[0], if_op.then_block), (op.regions[1], if_op.else_block)):
            anchor = anchor_at_end(block)
            values = inline_body(region.blocks[0], operands, anchor)
            with ir.InsertionPoint(anchor):
                scf.YieldOp(values)
            anchor.erase()
    replace_op(op, list(if_op.results))