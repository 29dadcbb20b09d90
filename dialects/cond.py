"""`tidal.cond`: if/else on a 0-d i1 tensor predicate (PyTorch's `torch.cond`).

    %r:n = "tidal.cond"(%pred, %operands...) ({ then: (operands...) -> yield r... },
                                              { else: (operands...) -> yield r... })
Both branches see every operand as a block argument (regions are isolated from above) and yield
values of the result types.
"""

from __future__ import annotations

from tidal.dialects.build import create_region_op
from tidal.dialects.checks import OpChecker
from tidal.dialects.registry import OpEntry, register
from tidal.dialects.types import is_predicate_type

NAME = "tidal.cond"


def verify_cond(op):
    c = OpChecker(op)
    operands = list(c.op.operands)
    if not operands:
        c.fail("requires a predicate operand")
    if not is_predicate_type(operands[0].type):
        c.fail(
            f"predicate (operand #0) must be a 0-d i1 tensor (tensor<i1> or "
            f"!torch.vtensor<[],i1>), got {operands[0].type}"
        )
    then_block, else_block = c.entry_blocks(["then", "else"])
    args = [(f"operand #{i + 1}", v.type) for i, v in enumerate(operands[1:])]
    outs = [(f"result #{i}", r.type) for i, r in enumerate(c.op.results)]
    for name, block in (("then", then_block), ("else", else_block)):
        c.block_args(block, name, args)
        c.yielded(block, name, outs)


def build_cond(pred, operands, result_types, then_fn=None, else_fn=None, loc=None):
    """then_fn/else_fn(*operands) -> values to yield; None leaves the blocks to the caller."""
    arg_types = [v.type for v in operands]
    return create_region_op(
        NAME,
        results=result_types,
        operands=[pred, *operands],
        attributes={},
        region_arg_types=[arg_types, arg_types],
        bodies=None if then_fn is None else [then_fn, else_fn],
        loc=loc,
    )


COND = register(
    OpEntry(
        name=NAME,
        summary="if/else on a 0-d i1 tensor (torch.cond)",
        doc=__doc__,
        verify=verify_cond,
        build=build_cond,
        operands=(
            ("pred", "0-d i1 tensor (tensor<i1> or !torch.vtensor<[],i1>)"),
            ("operands...", "values both branches receive as block arguments"),
        ),
        attributes=(),
        regions=(
            ("then", "(operands...) -> tidal.yield r..."),
            ("else", "(operands...) -> tidal.yield r..., the same types as then"),
        ),
        results=(("r...", "the taken branch's yielded values"),),
    )
)
