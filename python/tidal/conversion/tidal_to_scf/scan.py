"""`tidal.scan` → `scf.for` over the scanned dim."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf

from tidal.conversion import scf_builders as b
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.scan")
def lower_scan_to_scf(op):
    """`scf.for` over the scanned dim: slices in with `extract_slice`, per-step outputs written
    into preallocated stacks with `insert_slice`; carries and stacks are the loop's iter_args."""
    attr = lambda name: op.attributes[name].value  # noqa: E731
    n, k, dim, reverse = attr("num_carries"), attr("num_xs"), attr("dim"), attr("reverse")
    operands = list(op.operands)
    init, xs, consts = operands[:n], operands[n : n + k], operands[n + k :]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[n : n + k]]
    stacked_types = [r.type for r in list(op.results)[n:]]
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], dim)
        stacks = [
            b.empty_like_stacked(t, length, dim, f"'{op.name}' ys[{j}]", op.location)
            for j, t in enumerate(stacked_types)
        ]
        loop = scf.ForOp(b.index(0), length, b.index(1), init + stacks)
        iv, carried = loop.induction_variable, list(loop.inner_iter_args)
        anchor = b.anchor_at_end(loop.body)
        with ir.InsertionPoint(anchor):
            t = b.step_index(iv, length, reverse)
            x_t = [b.extract_step(x, dim, t, st) for x, st in zip(xs, slice_types)]
        yielded = b.inline_body(body, carried[:n] + x_t + consts, anchor)
        with ir.InsertionPoint(anchor):
            new_stacks = [b.insert_step(y, stack, dim, t) for y, stack in zip(yielded[n:], carried[n:])]
            scf.YieldOp(yielded[:n] + new_stacks)
        anchor.erase()
    b.replace_op(op, list(loop.results))