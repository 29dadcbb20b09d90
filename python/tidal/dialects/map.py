"""`tidal.map`: apply a body to every slice along dim 0 (PyTorch's `map`).

    %ys:m = "tidal.map"(%xs..., %consts...) {num_xs = k : i64}
               ({ body: (x_t..., consts...) -> yield y_t... })
Each result stacks the per-slice outputs along dim 0. Iterations are independent.
"""

from __future__ import annotations

from tidal.dialects.build import create_region_op, i64_attr
from tidal.dialects.checks import OpChecker, slice_type
from tidal.dialects.registry import OpRules, register
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


def lower_map_to_scf(op):
    """`scf.for` over dim 0 writing each slice's outputs into preallocated stacks."""
    from torch_mlir import ir
    from torch_mlir.dialects import scf

    from tidal.conversion import scf_builders as b

    k = op.attributes["num_xs"].value
    operands = list(op.operands)
    xs, consts = operands[:k], operands[k:]
    body = op.regions[0].blocks[0]
    slice_types = [a.type for a in list(body.arguments)[:k]]
    with ir.InsertionPoint(op), op.location:
        length = b.dim_size(xs[0], 0)
        stacks = [
            b.empty_like_stacked(r.type, length, 0, f"'{NAME}' ys[{j}]", op.location)
            for j, r in enumerate(op.results)
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


MAP = register(
    OpRules(
        name=NAME,
        summary="independent per-slice map along dim 0 (map)",
        verify=verify_map,
        build=build_map,
        lower_to_scf=lower_map_to_scf,
    )
)
