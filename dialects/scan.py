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
from tidal.dialects.registry import OpEntry, register

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


SCAN = register(
    OpEntry(
        name=NAME,
        summary="sequential scan with carries and stacked outputs (scan)",
        doc=__doc__,
        verify=verify_scan,
        build=build_scan,
        operands=(
            ("init...", "the first num_carries operands: initial carries"),
            ("xs...", "the next num_xs operands: scanned along dim, all of one length T"),
            ("consts...", "the rest: values the body captures (weights)"),
        ),
        attributes=(
            ("num_carries", "i64: how many operands are carries"),
            ("num_xs", "i64 >= 1: how many operands are scanned"),
            ("dim", "i64: the scanned dimension of every xs and ys"),
            ("reverse", "bool: run the steps from slice T-1 down to slice 0"),
        ),
        regions=(("body", "(carry..., x_t..., consts...) -> tidal.yield carry'..., y_t..."),),
        results=(
            ("carries...", "the final carries"),
            ("ys...", "per-step outputs stacked along dim (entry t from the step that read slice t)"),
        ),
    )
)
