"""`tidal.associative_scan` → a sequential running combine in an `scf.for`."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf

from tidal.conversion import scf_builders as b
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.associative_scan")
def lower_associative_scan_to_scf(op):
    """A sequential running combine on the CPU: acc = x_first; acc = combine(acc, x_t) for each
    later t (in scan order), written into the result as it goes. One pass, O(T) work."""
    k, dim, reverse = (op.attributes[a].value for a in ("num_xs", "dim", "reverse"))
    operands = list(op.operands)
    xs, consts = operands[:k], operands[k:]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[:k]]
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], dim)
        first = b.step_index(b.index(0), length, reverse)
        acc0 = [b.extract_step(x, dim, first, st) for x, st in zip(xs, slice_types)]
        outs0 = [b.insert_step(a, b.empty_like_stacked(x.type, length, dim, f"'{op.name}' result", op.location), dim, first)
                 for a, x in zip(acc0, xs)]
        loop = scf.ForOp(b.index(1), length, b.index(1), acc0 + outs0)
        iv, carried = loop.induction_variable, list(loop.inner_iter_args)
        anchor = b.anchor_at_end(loop.body)
        with ir.InsertionPoint(anchor):
            t = b.step_index(iv, length, reverse)
            x_t = [b.extract_step(x, dim, t, st) for x, st in zip(xs, slice_types)]
        combined = b.inline_body(body, carried[:k] + x_t + consts, anchor)
        with ir.InsertionPoint(anchor):
            outs = [b.insert_step(c, out, dim, t) for c, out in zip(combined, carried[k:])]
            scf.YieldOp(combined + outs)
        anchor.erase()
    b.replace_op(op, list(loop.results)[k:])