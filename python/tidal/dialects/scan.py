"""`tidal.scan`: a sequential loop over slices with a carried state (PyTorch's `scan`).

    %c:n, %ys:m = "tidal.scan"(%init..., %xs..., %consts...)
                     {num_carries = n : i64, num_xs = k : i64, dim = d : i64, reverse = false}
                     ({ body: (carry..., x_t..., consts...) -> yield carry'..., y_t... })
`x_t` is the slice of each xs at step t along `dim`; with `reverse` the steps run from the last
slice to the first. Each `ys` result stacks the per-step `y_t` along `dim`, entry t being the output
of the step that consumed slice t (torch's `scan` semantics after its flip/movedim).
"""

from __future__ import annotations

from tidal.dialects.build import bool_attr, create_region_op, i64_attr
from tidal.dialects.checks import OpChecker, slice_type
from tidal.dialects.registry import OpRules, register

NAME = "tidal.scan"


def scan_attrs(c: OpChecker):
    operands = list(c.op.operands)
    n = c.int_attr("num_carries", 0, len(operands))
    k = c.int_attr("num_xs", 1, len(operands) - n)
    dim = c.int_attr("dim", 0)
    reverse = c.bool_attr("reverse")
    return operands, n, k, dim, reverse


def verify_scan(op):
    c = OpChecker(op)
    operands, n, k, dim, reverse = scan_attrs(c)
    init, xs, consts = operands[:n], operands[n : n + k], operands[n + k :]
    length = c.scanned_length(xs, dim, n, "xs")
    (body,) = c.entry_blocks(["body"])
    c.block_args(
        body,
        "body",
        [(f"carry #{i}", v.type) for i, v in enumerate(init)]
        + [(f"slice of xs[{i}] along dim {dim}", slice_type(v.type, dim)) for i, v in enumerate(xs)]
        + [(f"const #{i}", v.type) for i, v in enumerate(consts)],
    )
    results = list(c.op.results)
    if len(results) < n:
        c.fail(f"has {len(results)} result(s) but num_carries = {n}")
    for i, (r, v) in enumerate(zip(results, init)):
        if r.type != v.type:
            c.fail(f"result #{i} has type {r.type} but carry init operand #{i} has type {v.type}")
    y = c.terminator(body, "body")
    ys = list(y.operands)[n:]
    c.yielded(
        body,
        "body",
        [(f"carry #{i} (carry match)", v.type) for i, v in enumerate(init)]
        + [(f"y #{j}", t.type) for j, t in enumerate(ys)],
    )
    if len(results) != n + len(ys):
        c.fail(f"has {len(results)} result(s) but its body yields {n} carries and {len(ys)} ys")
    for j, y_t in enumerate(ys):
        c.stacked_result(results[n + j], n + j, y_t.type, dim, length, f"ys[{j}]")


def build_scan(init, xs, consts, y_types, body_fn=None, dim=0, reverse=False, loc=None):
    """`y_types` are the per-step output types; results are carries then ys stacked along dim."""
    from tidal.dialects.types import tensor_spec

    length = tensor_spec(xs[0].type).shape[dim]
    stacked = [tensor_spec(t).with_dim(dim, length).to_type(t.context) for t in y_types]
    return create_region_op(
        NAME,
        results=[v.type for v in init] + stacked,
        operands=[*init, *xs, *consts],
        attributes={
            "num_carries": i64_attr(len(init)),
            "num_xs": i64_attr(len(xs)),
            "dim": i64_attr(dim),
            "reverse": bool_attr(reverse),
        },
        region_arg_types=[
            [v.type for v in init] + [slice_type(v.type, dim) for v in xs] + [v.type for v in consts]
        ],
        bodies=None if body_fn is None else [body_fn],
        loc=loc,
    )


def lower_scan_to_scf(op):
    """`scf.for` over the scanned dim: slices in with `extract_slice`, per-step outputs written
    into preallocated stacks with `insert_slice`; carries and stacks are the loop's iter_args."""
    from torch_mlir import ir
    from torch_mlir.dialects import scf

    from tidal.conversion import scf_builders as b

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
            b.empty_like_stacked(t, length, dim, f"'{NAME}' ys[{j}]", op.location)
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


SCAN = register(
    OpRules(
        name=NAME,
        summary="sequential scan with carries and stacked outputs (scan)",
        verify=verify_scan,
        build=build_scan,
        lower_to_scf=lower_scan_to_scf,
    )
)
