"""`tidal-cond-to-select`: a `tidal.cond` whose branches are cheap elementwise code becomes both
branches computed and an elementwise select on the device-side predicate (GPU backend).

On the GPU a `cond` run as control flow costs a device→host read of its predicate (a
synchronization: the host waits for every kernel before it) and then the chosen branch's kernels.
When both branches are elementwise (no reductions, no matmuls, no loops) computing both costs no
more memory traffic than one: after elementwise fusion the selects, both branches and their common
inputs are ONE kernel that reads the predicate from device memory, and nothing waits on the host.
Branches with any other op keep the control flow (their cost could differ a lot; the predicate
read is then the price of skipping one).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import linalg, tensor
from torch_mlir.dialects import arith

from tidal.passes.registry import ops_named, tidal_pass

_CHEAP = ("tensor.empty", "tensor.dim", "arith.constant", "linalg.fill", "linalg.generic", "tidal.yield")


def _cheap_branch(block) -> bool:
    for op in block.operations:
        name = op.operation.name
        if name not in _CHEAP:
            return False
        if name == "linalg.generic" and any("reduction" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
            return False
    return True


def _selectable(op) -> bool:
    pred = op.operands[0]
    if not (isinstance(pred.type, ir.RankedTensorType) and ir.RankedTensorType(pred.type).rank == 0):
        return False
    if not all(isinstance(r.type, ir.RankedTensorType) for r in op.results):
        return False
    return all(_cheap_branch(region.blocks[0]) for region in op.regions)


def _inline(op, region) -> list:
    """Move the branch's ops before `op` (its arguments replaced by the cond's operands); returns
    the values it yields."""
    block = region.blocks[0]
    for arg, value in zip(block.arguments, list(op.operands)[1:]):
        arg.replace_all_uses_with(value)
    yielded = None
    for inner in list(block.operations):
        if inner.operation.name == "tidal.yield":
            yielded = list(inner.operands)
            continue
        inner.operation.move_before(op)
    return yielded


def _select(pred, on_true, on_false, result_type):
    t = ir.RankedTensorType(result_type)
    rank = t.rank
    identity = ir.AffineMap.get_identity(rank)
    scalar = ir.AffineMap.get(rank, 0, [])
    # a dynamic dim (Dynamo's dynamic sizes) is the branches' own: both yield the result's shape
    sizes = [tensor.DimOp(on_true, arith.ConstantOp(ir.IndexType.get(), i).result).result
             if s == ir.ShapedType.get_dynamic_size() else s for i, s in enumerate(t.shape)]
    empty = tensor.EmptyOp(sizes, t.element_type).result
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    g = linalg.GenericOp(
        [result_type], [pred, on_true, on_false], [empty],
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in (scalar, identity, identity, identity)]),
        ir.ArrayAttr.get([parallel] * rank),
    )
    body = g.regions[0].blocks.append(ir.IntegerType.get_signless(1), t.element_type, t.element_type, t.element_type)
    with ir.InsertionPoint(body):
        linalg.YieldOp([arith.SelectOp(body.arguments[0], body.arguments[1], body.arguments[2]).result])
    return g.results[0]


@tidal_pass("tidal-cond-to-select", "Run a cond with elementwise branches as both branches and a device-side select (GPU)")
def cond_to_select(module_op):
    for op in ops_named(module_op, ("tidal.cond",)):
        if not _selectable(op):
            continue
        on_true = _inline(op, op.regions[0])
        on_false = _inline(op, op.regions[1])
        with ir.InsertionPoint(op), op.location:
            selected = [_select(op.operands[0], a, b, r.type) for a, b, r in zip(on_true, on_false, op.results)]
        for r, v in zip(op.results, selected):
            r.replace_all_uses_with(v)
        op.erase()
