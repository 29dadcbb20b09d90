"""`tidal-pad-as-generic`: a constant `tensor.pad` becomes a `linalg.generic` that reads its source
with masked loads (GPU backend).

Each result element at index i reads the source at i - low where that lies inside the source, and
is the pad value elsewhere: a gather whose indices are clamped into range and a select, which the
kernel builder makes as one load per element. As a generic it fuses with the elementwise ops
around it (a padded convolution's input, a shifted sequence), where a `tensor.pad` of its own
would be a separate ATen call and a round trip through memory.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg, tensor

from tidal.backends.gpu.kernels import defined_inside
from tidal.passes.registry import ops_named, tidal_pass

_DYNAMIC = -(2**63)


def _pad_value(op):
    """The pad's constant value (its region yields a value defined above it), or None."""
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    if len(ops) != 1:
        return None
    value = ops[0].operands[0]
    return None if defined_inside(value, op.operation) else value


def _mixed(op, name: str, dynamic: list) -> list:
    """Static values of `name` with each dynamic one taken from `dynamic`, in order, as index values
    (static ones as constants)."""
    values = []
    for v in ir.DenseI64ArrayAttr(op.attributes[name]):
        values.append(dynamic.pop(0) if v == _DYNAMIC else arith.ConstantOp(ir.IndexType.get(), v).result)
    return values


def _as_generic(op, value):
    src, result = op.operands[0], op.results[0]
    out_type = ir.RankedTensorType(result.type)
    rank, index, i64 = out_type.rank, ir.IndexType.get(), ir.IntegerType.get_signless(64)
    dynamic = list(op.operands)[1:]
    lows = _mixed(op, "static_low", dynamic)
    highs = _mixed(op, "static_high", dynamic)
    src_sizes = [tensor.DimOp(src, arith.ConstantOp(index, d).result).result for d in range(rank)]
    out_sizes = [arith.AddIOp(arith.AddIOp(src_sizes[d], lows[d]).result, highs[d]).result
                 if out_type.shape[d] == _DYNAMIC else out_type.shape[d] for d in range(rank)]
    empty = tensor.EmptyOp(out_sizes, out_type.element_type).result
    lows64 = [arith.IndexCastOp(i64, v).result for v in lows]
    sizes64 = [arith.IndexCastOp(i64, v).result for v in src_sizes]
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    g = linalg.GenericOp([result.type], [], [empty],
                         ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))]),
                         ir.ArrayAttr.get([parallel] * rank))
    body = g.regions[0].blocks.append(out_type.element_type)
    with ir.InsertionPoint(body):
        zero, one = arith.ConstantOp(i64, 0).result, arith.ConstantOp(i64, 1).result
        inside, at = None, []
        for d in range(rank):
            j = arith.SubIOp(arith.IndexCastOp(i64, linalg.IndexOp(d).result).result, lows64[d]).result
            ok = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.sge, j, zero).result,
                              arith.CmpIOp(arith.CmpIPredicate.slt, j, sizes64[d]).result).result
            inside = ok if inside is None else arith.AndIOp(inside, ok).result
            last = arith.SubIOp(sizes64[d], one).result
            clamped = arith.MaxSIOp(arith.MinSIOp(j, last).result, zero).result
            at.append(arith.IndexCastOp(index, clamped).result)
        read = tensor.ExtractOp(src, at).result
        linalg.YieldOp([arith.SelectOp(inside, read, value).result if inside is not None else read])
    return g.results[0]


@tidal_pass("tidal-pad-as-generic", "Make a constant tensor.pad a generic of masked loads, fusable with its neighbours (GPU)")
def pad_as_generic(module_op):
    for op in ops_named(module_op, ("tensor.pad",)):
        value = _pad_value(op)
        # the clamped index reads element 0 even where the mask is off: only a source known to
        # have one (a dynamic size may be 0 at run time: that pad stays an ATen call)
        if value is None or any(s <= 0 for s in ir.RankedTensorType(op.operands[0].type).shape):
            continue
        with ir.InsertionPoint(op), op.location:
            padded = _as_generic(op, value)
        op.results[0].replace_all_uses_with(padded)
        op.erase()
