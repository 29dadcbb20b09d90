"""`tidal.scan` → `scf.for` over the scanned dim."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf

from tidal.conversion import scf_builders as b
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF


@LOWER_TO_SCF.rule("tidal.scan")
def lower_scan_to_scf(op):
    """`scf.for` over the scanned dim: slices in with `extract_slice`, per-step outputs written
    into preallocated stacks with `insert_slice`; carries and stacks are the loop's iter_args.

    A carry that the body also stacks (an RNN's hidden state is both) is read back from its stack
    at the previous step's position, not carried: bufferized as a loop-carried value it would get
    a fresh buffer and a copy of the stacked slice on every step (measured on an RNN step: the
    copy, malloc and free took about a sixth of the time spent outside BLAS). The first step, the
    one that reads the initial carry, is peeled off the loop for that; scans of dynamic length
    keep the plain form."""
    attr = lambda name: op.attributes[name].value  # noqa: E731
    n, k, dim, reverse = attr("num_carries"), attr("num_xs"), attr("dim"), attr("reverse")
    operands = list(op.operands)
    init, xs, consts = operands[:n], operands[n : n + k], operands[n + k :]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[n : n + k]]
    stacked_types = [r.type for r in list(op.results)[n:]]
    stacked_as = _carries_also_stacked(body, n, ir.RankedTensorType(xs[0].type), dim)
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], dim)
        ys = list(list(body.operations)[-1].operands)[n:]
        outer_dim = b.body_argument_dims(body, operands, range(n, n + k), dim)
        stacks = [
            b.empty_like_stacked(t, length, dim, f"'{op.name}' ys[{j}]", op.location, b.stack_sizes(y, dim, outer_dim))
            for j, (t, y) in enumerate(zip(stacked_types, ys))
        ]
        first = b.index(0)
        if stacked_as:
            t0 = b.step_index(first, length, reverse)
            x_0 = [b.extract_step(x, dim, t0, st) for x, st in zip(xs, slice_types)]
            peeled = b.clone_body(body, init + x_0 + consts, op)
            init = peeled[:n]
            stacks = [b.insert_step(y, stack, dim, t0) for y, stack in zip(peeled[n:], stacks)]
            first = b.index(1)
        looped = [j for j in range(n) if j not in stacked_as]
        loop = scf.ForOp(first, length, b.index(1), [init[j] for j in looped] + stacks)
        iv, iter_args = loop.induction_variable, list(loop.inner_iter_args)
        carried, stack_args = dict(zip(looped, iter_args)), iter_args[len(looped) :]
        anchor = b.anchor_at_end(loop.body)
        with ir.InsertionPoint(anchor):
            t = b.step_index(iv, length, reverse)
            x_t = [b.extract_step(x, dim, t, st) for x, st in zip(xs, slice_types)]
            if stacked_as:
                previous = b.step_index(b.minus_one(iv), length, reverse)
            carries = [
                carried[j] if j in carried else b.extract_step(stack_args[stacked_as[j]], dim, previous, init[j].type)
                for j in range(n)
            ]
        yielded = b.inline_body(body, carries + x_t + consts, anchor)
        with ir.InsertionPoint(anchor):
            new_stacks = [b.insert_step(y, stack, dim, t) for y, stack in zip(yielded[n:], stack_args)]
            scf.YieldOp([yielded[j] for j in looped] + new_stacks)
        anchor.erase()
        results = list(loop.results)
        final, stacks_out = dict(zip(looped, results)), results[len(looped) :]
        if stacked_as:
            last = b.step_index(b.minus_one(length), length, reverse)
        finals = [
            final[j] if j in final else b.extract_step(stacks_out[stacked_as[j]], dim, last, init[j].type)
            for j in range(n)
        ]
    b.replace_op(op, finals + stacks_out)


def _carries_also_stacked(body: ir.Block, n: int, xs_type: ir.RankedTensorType, dim: int) -> dict[int, int]:
    """carry index -> the stacked output the body yields the same value as; empty when the
    scanned length is dynamic or 0 (the first step is peeled, so it must exist)."""
    if xs_type.is_dynamic_dim(dim) or xs_type.get_dim_size(dim) == 0:
        return {}
    yielded = list(list(body.operations)[-1].operands)
    carries, stacked = yielded[:n], yielded[n:]
    return {j: stacked.index(v) for j, v in enumerate(carries) if v in stacked}
