"""`tidal-accumulate-into-sliced-inputs`: a loop that reads a temporary one slice per iteration and
accumulates into that slice updates the temporary in place.

A scan's hoisted product `xw = xs @ W` (`tidal-scan-contractions`) is read one step at a time,
and `tidal-fold-into-matmul` makes each step's slice the init of the step's matmul
(`xw[t] + h @ U`: BLAS with beta = 1). The slice belongs to a tensor defined outside the loop, so
bufferization must not write it: it copies the slice into a fresh buffer on every iteration
(16 KB per step of an RNN with B = 32, H = 128, a fifth of the step's non-BLAS time). When each
iteration reads a different slice (at the induction variable, or counting down from a
loop-invariant bound), a slice is never read again once its iteration has used it: the temporary
becomes an iter_arg of the loop and the accumulated slice is inserted back, which One-Shot
bufferizes in place. Only temporaries that nothing reads after the loop qualify (their other reads,
such as a scan's peeled first step, come before it); one read later would make One-Shot copy
the whole temporary before the loop.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import scf, tensor

from tidal.conversion.scf_builders import anchor_at_end
from tidal.passes.registry import defining_op, is_within, ops_named, tidal_pass

_DYNAMIC = ir.ShapedType.get_dynamic_size()


def _defined_outside(v: ir.Value, loop: ir.Operation) -> bool:
    return not is_within(defining_op(v), loop)


def _before(op: ir.Operation, loop: ir.Operation) -> bool:
    """`op` runs before `loop` starts (e.g. the peeled first step of a scan reading its slice)."""
    op, target = op.operation, loop.block
    while op.name != "func.func":  # the module above has no block (the bindings crash on asking)
        if op.block == target:
            return op.is_before_in_block(loop)
        op = op.parent
    return False


def _distinct_per_iteration(offset: ir.Value, loop: ir.Operation, iv: ir.Value) -> bool:
    """`offset` is the induction variable or `c - iv` with `c` loop-invariant: every iteration
    reads a position no other iteration reads."""
    if offset == iv:
        return True
    owner = offset.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.subi" or owner.operands[1] != iv:
        return False
    return _defined_outside(owner.operands[0], loop)


def _accumulated_slice(loop: ir.Operation, extract: ir.Operation):
    """(writer, result index) when `extract` reads a temporary defined outside `loop`, one
    distinct unit slice per iteration, and its only use is as the init of a linalg op in the
    loop body; else None."""
    body = loop.regions[0].blocks[0]
    source = extract.operands[0]
    if isinstance(source.owner, ir.Block) or not _defined_outside(source, loop):
        return None
    if not all(_before(use.owner, loop) for use in source.uses if use.owner != extract):
        return None
    static_offsets = list(ir.DenseI64ArrayAttr(extract.attributes["static_offsets"]))
    static_sizes = list(ir.DenseI64ArrayAttr(extract.attributes["static_sizes"]))
    dynamic = [d for d, o in enumerate(static_offsets) if o == _DYNAMIC]
    if len(dynamic) != 1 or len(extract.operands) != 2 or static_sizes[dynamic[0]] != 1:
        return None
    if not _distinct_per_iteration(extract.operands[1], loop, body.arguments[0]):
        return None
    uses = list(extract.results[0].uses)
    if len(uses) != 1:
        return None
    writer, position = uses[0].owner, uses[0].operand_number
    if not writer.name.startswith("linalg.") or writer.parent != loop:
        return None
    inits_start = len(writer.operands) - len(writer.results)
    if position < inits_start:
        return None
    return writer, position - inits_start


def _thread_through(loop: ir.Operation, extract: ir.Operation, writer: ir.Operation, result: int) -> ir.Operation:
    """`loop` rebuilt with the sliced temporary as one more iter_arg, updated by the writer."""
    old_body = loop.regions[0].blocks[0]
    lower, upper, step, *inits = loop.operands
    with ir.InsertionPoint(loop), loop.location:
        new = scf.ForOp(lower, upper, step, inits + [extract.operands[0]])
    new_args = list(new.body.arguments)
    for a, b in zip(old_body.arguments, new_args):
        a.replace_all_uses_with(b)
    old_yield = list(old_body.operations)[-1]
    with loop.location:
        anchor = anchor_at_end(new.body)
    for op in list(old_body.operations)[:-1]:
        op.move_before(anchor)
    extract.operands[0] = new_args[-1]
    with ir.InsertionPoint(anchor), loop.location:
        updated = tensor.InsertSliceOp(
            writer.results[result], new_args[-1], [extract.operands[1]], [], [],
            extract.attributes["static_offsets"], extract.attributes["static_sizes"],
            extract.attributes["static_strides"],
        ).result
        scf.YieldOp(list(old_yield.operands) + [updated])
    anchor.erase()
    for r, v in zip(loop.results, list(new.results)[:-1]):
        r.replace_all_uses_with(v)
    loop.erase()
    return new.operation


@tidal_pass(
    "tidal-accumulate-into-sliced-inputs",
    "Thread a temporary read one slice per scf.for iteration and accumulated into through the loop",
)
def accumulate_into_sliced_inputs(module_op):
    for loop in ops_named(module_op, ("scf.for",)):
        while (found := _first_accumulated_slice(loop)) is not None:
            loop = _thread_through(loop, *found)


def _first_accumulated_slice(loop: ir.Operation):
    """(extract, writer, result index) of the first slice of the body that qualifies, or None."""
    for op in loop.regions[0].blocks[0].operations:
        if op.name == "tensor.extract_slice" and (match := _accumulated_slice(loop, op.operation)):
            return (op.operation, *match)
    return None
