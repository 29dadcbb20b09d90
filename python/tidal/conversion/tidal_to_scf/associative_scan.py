"""`tidal.associative_scan` → a sequential running combine in an `scf.for`."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, scf

from tidal.conversion import scf_builders as b
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.associative_scan")
def lower_associative_scan_to_scf(op):
    """A sequential running combine on the CPU: out[first] = x[first], then
    out[t] = combine(out[t-1], x[t]) for each later t (in scan order). One pass, O(T) work.

    The loop carries only the results: the previous prefix is read back from them, so once
    `eliminate-empty-tensors` lets the combine write its slice of the result in place (the slices
    at t-1 and t are provably disjoint), a step allocates and copies nothing."""
    k, dim, reverse = (op.attributes[a].value for a in ("num_xs", "dim", "reverse"))
    operands = list(op.operands)
    xs, consts = operands[:k], operands[k:]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[:k]]
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], dim)
        first = b.step_index(b.index(0), length, reverse)
        outs0 = [
            b.insert_step(
                b.extract_step(x, dim, first, st),
                b.empty_like_stacked(x.type, length, dim, f"'{op.name}' result", op.location),
                dim,
                first,
            )
            for x, st in zip(xs, slice_types)
        ]
        loop = scf.ForOp(b.index(1), length, b.index(1), outs0)
        iv, outs = loop.induction_variable, list(loop.inner_iter_args)
        anchor = b.anchor_at_end(loop.body)
        with ir.InsertionPoint(anchor):
            t = b.step_index(iv, length, reverse)
            prev = b.step_index(arith.SubIOp(iv, b.index(1)).result, length, reverse)
            acc = [b.extract_step(out, dim, prev, st) for out, st in zip(outs, slice_types)]
            x_t = [b.extract_step(x, dim, t, st) for x, st in zip(xs, slice_types)]
        combined = b.inline_body(body, acc + x_t + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.YieldOp([b.insert_step(c, out, dim, t) for c, out in zip(combined, outs)])
        anchor.erase()
    b.replace_op(op, list(loop.results))
