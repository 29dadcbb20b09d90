"""`tidal.associative_scan`: inclusive prefix scan with an associative combine function.

    %r:k = "tidal.associative_scan"(%xs..., %consts...)
              {num_xs = k : i64, dim = d : i64, reverse = false}
              ({ combine: (lhs..., rhs..., consts...) -> yield out... })
The combine function works on one element position: lhs/rhs are slices of the xs along `dim`.
Result t is combine(x_0, ..., x_t) (with `reverse`, combine(x_t, ..., x_{T-1})), so the results
have the types of the xs. Associativity is the user's promise: it licenses parallel lowerings.
"""

from __future__ import annotations

from tidal.dialects.build import bool_attr, create_region_op, i64_attr
from tidal.dialects.checks import OpChecker, slice_type
from tidal.dialects.registry import OpRules, register

NAME = "tidal.associative_scan"


def verify_associative_scan(op):
    c = OpChecker(op)
    operands = list(c.op.operands)
    k = c.int_attr("num_xs", 1, len(operands))
    dim = c.int_attr("dim", 0)
    c.bool_attr("reverse")
    xs, consts = operands[:k], operands[k:]
    c.scanned_length(xs, dim, 0, "xs")
    slices = [slice_type(v.type, dim) for v in xs]
    (combine,) = c.entry_blocks(["combine"])
    c.block_args(
        combine,
        "combine",
        [(f"lhs slice of xs[{i}]", t) for i, t in enumerate(slices)]
        + [(f"rhs slice of xs[{i}]", t) for i, t in enumerate(slices)]
        + [(f"const #{i}", v.type) for i, v in enumerate(consts)],
    )
    c.yielded(combine, "combine", [(f"combined xs[{i}]", t) for i, t in enumerate(slices)])
    results = list(c.op.results)
    if len(results) != k:
        c.fail(f"has {len(results)} result(s) but num_xs = {k}")
    for i, (r, v) in enumerate(zip(results, xs)):
        if r.type != v.type:
            c.fail(f"result #{i} has type {r.type} but xs operand #{i} has type {v.type}")


def build_associative_scan(xs, consts, combine_fn=None, dim=0, reverse=False, loc=None):
    slices = [slice_type(v.type, dim) for v in xs]
    return create_region_op(
        NAME,
        results=[v.type for v in xs],
        operands=[*xs, *consts],
        attributes={"num_xs": i64_attr(len(xs)), "dim": i64_attr(dim), "reverse": bool_attr(reverse)},
        region_arg_types=[slices + slices + [v.type for v in consts]],
        bodies=None if combine_fn is None else [combine_fn],
        loc=loc,
    )


def lower_associative_scan_to_scf(op):
    """A sequential running combine on the CPU: acc = x_first; acc = combine(acc, x_t) for each
    later t (in scan order), written into the result as it goes. One pass, O(T) work."""
    from torch_mlir import ir
    from torch_mlir.dialects import scf

    from tidal.conversion import scf_builders as b

    k, dim, reverse = (op.attributes[a].value for a in ("num_xs", "dim", "reverse"))
    operands = list(op.operands)
    xs, consts = operands[:k], operands[k:]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[:k]]
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], dim)
        first = b.step_index(b.index(0), length, reverse)
        acc0 = [b.extract_step(x, dim, first, st) for x, st in zip(xs, slice_types)]
        outs0 = [b.insert_step(a, b.empty_like_stacked(x.type, length, dim, f"'{NAME}' result", op.location), dim, first)
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


ASSOCIATIVE_SCAN = register(
    OpRules(
        name=NAME,
        summary="inclusive prefix scan with an associative combine (associative_scan)",
        verify=verify_associative_scan,
        build=build_associative_scan,
        lower_to_scf=lower_associative_scan_to_scf,
    )
)
