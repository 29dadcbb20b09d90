"""`tidal.cond`: if/else on a 0-d i1 tensor predicate (PyTorch's `torch.cond`).

    %r:n = "tidal.cond"(%pred, %operands...) ({ then: (operands...) -> yield r... },
                                              { else: (operands...) -> yield r... })
Both branches see every operand as a block argument (regions are isolated from above) and yield
values of the result types.
"""

from __future__ import annotations

from tidal.dialects.build import create_region_op
from tidal.dialects.checks import OpChecker
from tidal.dialects.registry import OpRules, register
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


def lower_cond_to_scf(op):
    """`scf.if` on the predicate's scalar; each branch's body is inlined with its operands."""
    from torch_mlir import ir
    from torch_mlir.dialects import scf, tensor

    from tidal.conversion.scf_builders import anchor_at_end, inline_body, replace_op

    pred, *operands = list(op.operands)
    with ir.InsertionPoint(op), op.location:
        flag = tensor.extract(pred, [])
        if_op = scf.IfOp(flag, [r.type for r in op.results], has_else=True)
        for region, block in ((op.regions[0], if_op.then_block), (op.regions[1], if_op.else_block)):
            anchor = anchor_at_end(block)
            values = inline_body(region.blocks[0], operands, anchor)
            with ir.InsertionPoint(anchor):
                scf.YieldOp(values)
            anchor.erase()
    replace_op(op, list(if_op.results))


COND = register(
    OpRules(
        name=NAME,
        summary="if/else on a 0-d i1 tensor (torch.cond)",
        verify=verify_cond,
        build=build_cond,
        lower_to_scf=lower_cond_to_scf,
    )
)
