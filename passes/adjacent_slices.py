"""`tidal-fold-adjacent-slices`: a concat of adjacent slices that tile a tensor is that tensor.

tidal's adjoints split a tensor along the scanned dim (step 0 apart from steps 1..T-1: x̄_0 = G_0,
x̄_t = J_tᵀ G_t) and, where J is the identity (a linear recurrence's b), join the pieces again:
`concat(slice(G, 0, 1), slice(G, 1, T-1))`, a copy of every element of G. When a
`tensor.concat`'s operands are unit-stride slices of one source, whole in every other dim, each
starting where the one before ended, the first at 0 and the last ending at the source's end
(static sizes), the concat is the source. `tiled_source` is shared with the CPU backend's
`tidal-concat-in-place`, which folds the same concats before making the others inserts.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass


def _static_list(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def tiled_source(concat: ir.Operation, dim: int) -> ir.Value | None:
    """The tensor that the operands, all static unit-stride slices of it, tile along `dim`."""
    source, next_offset = None, 0
    for v in concat.operands:
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.name != "tensor.extract_slice":
            return None
        src = owner.operands[0]
        if source is None:
            source = src
        if src != source or len(owner.operands) != 1:  # dynamic offsets, sizes or strides
            return None
        t = ir.RankedTensorType(src.type)
        offsets, sizes, strides = (_static_list(owner, a) for a in ("static_offsets", "static_sizes", "static_strides"))
        if not t.has_static_shape or len(sizes) != t.rank or ir.RankedTensorType(v.type).rank != t.rank:
            return None
        full = [d for k, d in enumerate(t.shape) if k != dim]
        if (any(s != 1 for s in strides) or offsets[dim] != next_offset
                or [o for k, o in enumerate(offsets) if k != dim] != [0] * (t.rank - 1)
                or [s for k, s in enumerate(sizes) if k != dim] != full):
            return None
        next_offset += sizes[dim]
    if source is None or next_offset != ir.RankedTensorType(source.type).shape[dim] or source.type != concat.result.type:
        return None
    return source


@tidal_pass("tidal-fold-adjacent-slices", "Fold a concat of adjacent slices tiling a tensor into the tensor")
def fold_adjacent_slices(module_op):
    for concat in ops_named(module_op, ("tensor.concat",)):
        source = tiled_source(concat, ir.IntegerAttr(concat.attributes["dim"]).value)
        if source is not None:
            concat.results[0].replace_all_uses_with(source)
            concat.erase()
