"""`tidal.map` → `scf.for` over dim 0."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf

from tidal.conversion import scf_builders as b
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.map")
def lower_map_to_scf(op):
    """`scf.for` over dim 0 writing each slice's outputs into preallocated stacks."""
    k = op.attributes["num_xs"].value
    operands = list(op.operands)
    xs, consts = operands[:k], operands[k:]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[:k]]
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], 0)
        ys = list(list(body.operations)[-1].operands)
        outer_dim = b.body_argument_dims(body, operands, range(k), 0)
        stacks = [
            b.empty_like_stacked(r.type, length, 0, f"'{op.name}' ys[{j}]", op.location, b.stack_sizes(y, 0, outer_dim))
            for j, (r, y) in enumerate(zip(op.results, ys))
        ]
        loop = scf.ForOp(b.index(0), length, b.index(1), stacks)
        iv, carried = loop.induction_variable, list(loop.inner_iter_args)
        anchor = b.anchor_at_end(loop.body)
        with ir.InsertionPoint(anchor):
            x_t = [b.extract_step(x, 0, iv, st) for x, st in zip(xs, slice_types)]
        yielded = b.inline_body(body, x_t + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.YieldOp([b.insert_step(y, stack, 0, iv) for y, stack in zip(yielded, carried)])
        anchor.erase()
    b.replace_op(op, list(loop.results))