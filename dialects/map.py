"""`tidal.map`: apply a body to every slice along dim 0 (PyTorch's `map`).

    %ys:m = "tidal.map"(%xs..., %consts...) {num_xs = k : i64}
               ({ body: (x_t..., consts...) -> yield y_t... })
Each result stacks the per-slice outputs along dim 0. Iterations are independent.
"""

from __future__ import annotations

from tidal.dialects.build import create_region_op, i64_attr
from tidal.dialects.checks import OpChecker, slice_type
from tidal.dialects.registry import OpEntry, register
from tidal.dialects.types import tensor_spec

NAME = "tidal.map"


def verify_map(op):
    c = OpChecker(op)
    operands = list(c.op.operands)
    k = c.int_attr("num_xs", 1, len(operands))
    xs, consts = operands[:k], operands[k:]
    length = c.scanned_length(xs, 0, 0, "xs")
    (body,) = c.entry_blocks(["body"])
    c.block_args(
        body,
        "body",
        [(f"slice of xs[{i}] along dim 0", slice_type(v.type, 0)) for i, v in enumerate(xs)]
        + [(f"const #{i}", v.type) for i, v in enumerate(consts)],
    )
    ys = list(c.terminator(body, "body").operands)
    results = list(c.op.results)
    if len(results) != len(ys):
        c.fail(f"has {len(results)} result(s) but its body yields {len(ys)}")
    for j, (r, y) in enumerate(zip(results, ys)):
        c.stacked_result(r, j, y.type, 0, length, f"ys[{j}]")


def build_map(xs, consts, y_types, body_fn=None, loc=None):
    length = tensor_spec(xs[0].type).shape[0]
    return create_region_op(
        NAME,
        results=[tensor_spec(t).with_dim(0, length).to_type(t.context) for t in y_types],
        operands=[*xs, *consts],
        attributes={"num_xs": i64_attr(len(xs))},
        region_arg_types=[[slice_type(v.type, 0) for v in xs] + [v.type for v in consts]],
        bodies=None if body_fn is None else [body_fn],
        loc=loc,
    )


MAP = register(
    OpEntry(
        name=NAME,
        summary="independent per-slice map along dim 0 (map)",
        doc=__doc__,
        verify=verify_map,
        build=build_map,
        operands=(
            ("xs...", "the first num_xs operands: mapped over dim 0, all of one length"),
            ("consts...", "the rest: values the body captures"),
        ),
        attributes=(("num_xs", "i64 >= 1: how many operands are mapped"),),
        regions=(("body", "(x_t..., consts...) -> tidal.yield y_t..."),),
        results=(("ys...", "per-slice outputs stacked along dim 0"),),
    )
)
