"""`tidal.while`: a loop with a data-dependent trip count (PyTorch's `while_loop`).

    %r:n = "tidal.while"(%carries..., %consts...) {num_carries = n : i64}
             ({ cond: (carries..., consts...) -> yield %pred : tensor<i1> },
              { body: (carries..., consts...) -> yield carries'... })
Results are the final carries; the body must yield exactly the carry types ("carry match").

With `stack_outputs = true` (PyTorch's `while_loop_stack_output`, what reverse mode needs), the
results are instead every iteration's yielded carries stacked along a new leading dim of dynamic
size, one row per iteration; when the loop runs zero times, one row holding the initial carries.
"""

from __future__ import annotations

from tidal.dialects.build import bool_attr, create_region_op, i64_attr
from tidal.dialects.checks import OpChecker
from tidal.dialects.registry import OpEntry, register
from tidal.dialects.types import DYNAMIC, is_predicate_type, tensor_spec

NAME = "tidal.while"


def verify_while(op):
    c = OpChecker(op)
    operands = list(c.op.operands)
    n = c.int_attr("num_carries", 0, len(operands))
    stacked = c.bool_attr("stack_outputs", default=False)
    carries = operands[:n]
    results = list(c.op.results)
    if len(results) != n:
        c.fail(f"has {len(results)} result(s) but num_carries = {n}")
    for i, (r, v) in enumerate(zip(results, carries)):
        expected = stacked_type(v.type) if stacked else v.type
        if r.type != expected:
            what = "the stacked carry operand" if stacked else "carry operand"
            c.fail(f"result #{i} has type {r.type} but {what} #{i} has type {expected}")
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


def stacked_type(t):
    """A carry's type with a leading dynamic dim: one row per iteration."""
    return tensor_spec(t).with_dim(0, DYNAMIC).to_type(t.context)


def build_while(carries, consts, cond_fn=None, body_fn=None, loc=None, stack_outputs=False):
    """cond_fn(*carries, *consts) -> [pred]; body_fn(...) -> new carries."""
    operands = [*carries, *consts]
    arg_types = [v.type for v in operands]
    attributes = {"num_carries": i64_attr(len(carries))}
    if stack_outputs:
        attributes["stack_outputs"] = bool_attr(True)
    return create_region_op(
        NAME,
        results=[stacked_type(v.type) if stack_outputs else v.type for v in carries],
        operands=operands,
        attributes=attributes,
        region_arg_types=[arg_types, arg_types],
        bodies=None if cond_fn is None else [cond_fn, body_fn],
        loc=loc,
    )


WHILE = register(
    OpEntry(
        name=NAME,
        summary="loop while a 0-d i1 predicate holds (while_loop)",
        doc=__doc__,
        verify=verify_while,
        build=build_while,
        operands=(
            ("carries...", "the first num_carries operands: the loop state"),
            ("consts...", "the rest: values the regions capture (weights), unchanged by the loop"),
        ),
        attributes=(
            ("num_carries", "i64: how many operands are carries"),
            ("stack_outputs", "bool, optional: results stack every iteration's carries (reverse mode)"),
        ),
        regions=(
            ("cond", "(carries..., consts...) -> tidal.yield pred (0-d i1 tensor)"),
            ("body", "(carries..., consts...) -> tidal.yield carries'... (carry types match)"),
        ),
        results=(("carries...", "the final carries (stack_outputs: [iterations or 1, ...carry])"),),
    )
)
