"""`tidal-concat-in-place`: a `tensor.concat` becomes writes of its operands into one buffer.

- Slices that tile a tensor along the concatenated dim, in order, concatenate to that tensor
  (an adjoint's `cat([g[:1], g[1:]])`): the concat goes, no copy at all.
- Any other concat of at most `MAX_OPERANDS` operands becomes `tensor.empty` and one
  `tensor.insert_slice` per operand. Bufferized as a concat, every operand is computed into a
  buffer of its own and copied; as inserts, `eliminate-empty-tensors` lets the op producing an
  operand write its slice of the result directly (`cat([zeros, g[1:] * h[:-1]])`: one buffer, one
  pass). A long concat (the final `stack` of a loop Dynamo unrolled 512 times) stays: One-Shot's
  analysis of a long insert chain costs seconds.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import tensor

from tidal.passes.adjacent_slices import tiled_source
from tidal.passes.registry import ops_named, tidal_pass

MAX_OPERANDS = 8


def _as_inserts(concat: ir.Operation, dim: int) -> ir.Value | None:
    """The inserts, for static shapes (a dynamic concat stays: its offsets would be computed)."""
    result_type = ir.RankedTensorType(concat.result.type)
    if not all(ir.RankedTensorType(v.type).has_static_shape for v in [*concat.operands, concat.result]):
        return None
    with ir.InsertionPoint(concat), concat.location:
        full = tensor.EmptyOp(result_type.shape, result_type.element_type).result
        offset = 0
        for v in concat.operands:
            shape = list(ir.RankedTensorType(v.type).shape)
            offsets = [offset if k == dim else 0 for k in range(len(shape))]
            full = tensor.insert_slice(v, full, [], [], [], offsets, shape, [1] * len(shape))
            offset += shape[dim]
    return full


@tidal_pass("tidal-concat-in-place", "tensor.concat: tiling slices fold to their tensor, short concats become inserts")
def concat_in_place(module_op):
    for concat in ops_named(module_op, ("tensor.concat",)):
        dim = ir.IntegerAttr(concat.attributes["dim"]).value
        replacement = tiled_source(concat, dim)
        if replacement is None and len(concat.operands) <= MAX_OPERANDS:
            replacement = _as_inserts(concat, dim)
        if replacement is not None:
            concat.result.replace_all_uses_with(replacement)
            concat.erase()
