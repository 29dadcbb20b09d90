"""`tidal-fold-adjacent-slices`: a concat of adjacent slices that tile a tensor is that tensor.

tidal's adjoints split a tensor along the scanned dim (step 0 apart from steps 1..T-1: x̄_0 = G_0,
x̄_t = J_tᵀ G_t) and, where J is the identity (a linear recurrence's b), join the pieces again:
`concat(slice(G, 0, 1), slice(G, 1, T-1))`, a copy of every element of G. When a
`tensor.concat`'s operands are unit-stride slices of one source, whole in every other dim, each
starting where the one before ended, the first at 0 and the last ending at the source's end
(static sizes), the concat is the source.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass

_DYNAMIC = -(2**63)


def _static(op, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _tiled_source(concat) -> ir.Value | None:
    dim = ir.IntegerAttr(concat.attributes["dim"]).value
    source, end = None, 0
    for part in concat.operands:
        owner = part.owner
        if isinstance(owner, ir.Block) or owner.name != "tensor.extract_slice":
            return None
        src = owner.operands[0]
        if source is None:
            source = src
        elif src != source:
            return None
        shape = list(ir.RankedTensorType(src.type).shape)
        offsets, sizes, strides = (_static(owner, n) for n in ("static_offsets", "static_sizes", "static_strides"))
        if len(sizes) != len(shape) or _DYNAMIC in shape or any(s != 1 for s in strides):
            return None
        if any(o != (end if d == dim else 0) for d, o in enumerate(offsets)):
            return None
        if any(s != shape[d] for d, s in enumerate(sizes) if d != dim):
            return None
        end += sizes[dim]
    if source is None or end != ir.RankedTensorType(source.type).shape[dim]:
        return None
    return source if source.type == concat.results[0].type else None


@tidal_pass("tidal-fold-adjacent-slices", "Fold a concat of adjacent slices tiling a tensor into the tensor")
def fold_adjacent_slices(module_op):
    for concat in ops_named(module_op, ("tensor.concat",)):
        source = _tiled_source(concat)
        if source is not None:
            concat.results[0].replace_all_uses_with(source)
            concat.erase()
