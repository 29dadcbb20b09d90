"""`tidal.while` → `scf.while`."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf, tensor

from tidal.conversion.scf_builders import anchor_at_end, inline_body, replace_op
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.while")
def lower_while_to_scf(op):
    """`scf.while`: the cond region computes the predicate (extracted to i1) in `before`, the
    body region runs in `after`; consts are the op's own operands, visible inside scf regions."""
    operands = list(op.operands)
    n = ir.IntegerAttr(op.attributes["num_carries"]).value
    carries, consts = operands[:n], operands[n:]
    types = [v.type for v in carries]
    with ir.InsertionPoint(op), op.location:
        loop = scf.WhileOp(types, carries)
        before = loop.before.blocks.append(*types, arg_locs=[op.location] * n)
        after = loop.after.blocks.append(*types, arg_locs=[op.location] * n)
        anchor = anchor_at_end(before)
        (pred,) = inline_body(op.regions[0].blocks[0], list(before.arguments) + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.ConditionOp(tensor.extract(pred, []), list(before.arguments))
        anchor.erase()
        anchor = anchor_at_end(after)
        new_carries = inline_body(op.regions[1].blocks[0], list(after.arguments) + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.YieldOp(new_carries)
        anchor.erase()
    replace_op(op, list(loop.results))