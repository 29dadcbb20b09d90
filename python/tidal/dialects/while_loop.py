"""`tidal.while`: a loop with a data-dependent trip count (PyTorch's `while_loop`).

    %r:n = "tidal.while"(%carries..., %consts...) {num_carries = n : i64}
             ({ cond: (carries..., consts...) -> yield %pred : tensor<i1> },
              { body: (carries..., consts...) -> yield carries'... })
Results are the final carries; the body must yield exactly the carry types ("carry match").
"""

from __future__ import annotations

from tidal.dialects.build import create_region_op, i64_attr
from tidal.dialects.checks import OpChecker
from tidal.dialects.registry import OpRules, register
from tidal.dialects.types import is_predicate_type

NAME = "tidal.while"


def verify_while(op):
    c = OpChecker(op)
    operands = list(c.op.operands)
    n = c.int_attr("num_carries", 0, len(operands))
    carries = operands[:n]
    results = list(c.op.results)
    if len(results) != n:
        c.fail(f"has {len(results)} result(s) but num_carries = {n}")
    for i, (r, v) in enumerate(zip(results, carries)):
        if r.type != v.type:
            c.fail(f"result #{i} has type {r.type} but carry operand #{i} has type {v.type}")
    cond_block, body_block = c.entry_blocks(["cond", "body"])
    args = [
        (f"{'carry' if i < n else 'const'} operand #{i}", v.type) for i, v in enumerate(operands)
    ]
    c.block_args(cond_block, "cond", args)
    c.block_args(body_block, "body", args)
    preds = list(c.terminator(cond_block, "cond").operands)
    if len(preds) != 1 or not is_predicate_type(preds[0].type):
        got = ", ".join(str(p.type) for p in preds) or "nothing"
        c.fail(f"cond region must yield one 0-d i1 tensor predicate, got {got}")
    c.yielded(body_block, "body", [(f"carry #{i} (carry match)", v.type) for i, v in enumerate(carries)])


def build_while(carries, consts, cond_fn=None, body_fn=None, loc=None):
    """cond_fn(*carries, *consts) -> [pred]; body_fn(...) -> new carries."""
    operands = [*carries, *consts]
    arg_types = [v.type for v in operands]
    return create_region_op(
        NAME,
        results=[v.type for v in carries],
        operands=operands,
        attributes={"num_carries": i64_attr(len(carries))},
        region_arg_types=[arg_types, arg_types],
        bodies=None if cond_fn is None else [cond_fn, body_fn],
        loc=loc,
    )


def lower_while_to_scf(op):
    """`scf.while`: the cond region computes the predicate (extracted to i1) in `before`, the
    body region runs in `after`; consts are the op's own operands, visible inside scf regions."""
    from torch_mlir import ir
    from torch_mlir.dialects import scf, tensor

    from tidal.conversion.scf_builders import anchor_at_end, inline_body, replace_op

    operands = list(op.operands)
    n = ir.IntegerAttr(op.attributes["num_carries"]).value
    carries, consts = operands[:n], operands[n:]
    types = [v.type for v in carries]
    with ir.InsertionPoint(op), op.location:
        loop = scf.WhileOp(types, carries)
        before = loop.before.blocks.append(*types, arg_locs=[op.location] * n)
        after = loop.after.blocks.append(*types, arg_locs=[op.location] * n)
        anchor = anchor_at_end(before)
        (pred,) = inline_body(op.regions[0].blocks[0], list(before.arguments) + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.ConditionOp(tensor.extract(pred, []), list(before.arguments))
        anchor.erase()
        anchor = anchor_at_end(after)
        new_carries = inline_body(op.regions[1].blocks[0], list(after.arguments) + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.YieldOp(new_carries)
        anchor.erase()
    replace_op(op, list(loop.results))


WHILE = register(
    OpRules(
        name=NAME,
        summary="loop while a 0-d i1 predicate holds (while_loop)",
        verify=verify_while,
        build=build_while,
        lower_to_scf=lower_while_to_scf,
    )
)
