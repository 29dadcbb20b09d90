"""Elementwise ops on the CPU in register tiles; permutes fused into their consumers first.

`tidal-transposes-to-generics`: torch-mlir lowers a permute to a named `linalg.transpose`, which
elementwise fusion does not fold into its consumer (it fuses generics): `x.permute(...) + 1` was
two passes over the data and a temporary. A transpose read only by generics becomes the
equivalent generic (a transpose feeding a matmul was already folded into it by
`tidal-fold-into-matmul`, which runs before).

`tidal-tile-elementwise`: a generic that reads an input transposed runs in 16x16 register tiles,
one that reads every input in order and whose rows are short runs in rows of 16 lanes.

Lowered to loops, a permute reads (or writes) one of its operands with a stride in its innermost
loop, which LLVM vectorizes with gathers or scatters: a 1 MiB NCHW->NHWC permute took 0.224 ms
against Inductor's 0.088 (1 thread), and channels-last convolutions put two around every call.
Tiled over the output's innermost dim and the dim the input reads contiguously, each 16x16 tile
is 16 contiguous vector reads, a transpose in registers (`vector.transpose`, lowered to the
shuffle sequence written for AVX-512's 16 lanes), the elementwise body on vectors and 16
contiguous vector writes; the other dims are loops of one. Only static elementwise generics of
32-bit values whose two tiled dims are multiples of 16 are tiled (a partial tile would need
masked vectors), at a function's top level; every other generic is left as it was.

Rows: with no transposed input, the same tiling with 1x16 tiles gives vector reads, arithmetic
and writes along the innermost dim. Without it, LLVM fully unrolls an innermost loop of a few
dozen iterations (an NCHW tensor's rows of 32) before its vectorizers run, and the SLP vectorizer
cannot move the unrolled loads above the stores (every buffer may alias every other): `x + 1` on
[8, 32, 32, 32] ran as 32 scalar adds per row, 162 us against eager's 60 (1 thread); in rows of
16 lanes, 100 us. Rows longer than `MAX_ROW` are left to LLVM's loop vectorizer, which versions
the loop on a runtime alias check and vectorizes it (an MLP with rows of 256 and 512 ran 6% slower
tiled), and so are ops under `MIN_ROWS_ELEMENTS` elements: the tiles' parallel loop starts the
thread team for one op, where `tidal-parallelize-generics` runs consecutive ops over the same rows
in one team start (a softmax's passes over [4, 64, 64]: attention at 2 threads ran 8% slower
with them tiled).
A broadcast operand seen through size-1 dims (a [C] scale viewed as [1, C, 1, 1]) is read through
its source, so its tile is one vector broadcast over rows (`_read_without_unit_dims`).
A tiled loop reads a broadcast operand (a per-channel scale) at the same index on every step of
the innermost loop; `loop-invariant-code-motion`, run after this pass, takes such reads and the
arithmetic on them out of it (tensors cannot alias; after bufferization LLVM could not tell).
"""

from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects.transform import interpreter

from tidal.backends.cpu.parallel_generics import MIN_ELEMENTS
from tidal.passes.registry import map_dims, ops_named, tidal_pass

TILE = 16
MAX_ROW = 64
MIN_ROWS_ELEMENTS = 4 * MIN_ELEMENTS
_MARK = "tidal.tile_elementwise"


def _script(rank: int, inner_in: int) -> str:
    sizes = [1] * rank
    sizes[rank - 1] = sizes[inner_in] = TILE
    outer, inner = [sizes[0]] + [0] * (rank - 1), [0] + sizes[1:]
    loops = ", ".join(["!transform.any_op"] * (rank - 1))
    names = ", ".join(f"%l{i}" for i in range(1, rank))
    return f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %ops = transform.structured.match attributes{{{_MARK} = array<i64: {rank}, {inner_in}>}} in %root : (!transform.any_op) -> !transform.any_op
    %chunk, %l0 = transform.structured.tile_using_forall %ops tile_sizes {outer} : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %tiled, {names} = transform.structured.tile_using_for %chunk tile_sizes {inner} : (!transform.any_op) -> (!transform.any_op, {loops})
    transform.structured.vectorize %tiled : !transform.any_op
    %funcs = transform.structured.match ops{{["func.func"]}} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    }} : !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
      transform.apply_patterns.vector.drop_unit_dims_with_shape_cast
      transform.apply_patterns.canonicalization
    }} : !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_16x16"
      transform.apply_patterns.vector.transfer_to_scf max_transfer_rank = 1 full_unroll = true
    }} : !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.canonicalization
    }} : !transform.any_op
    transform.yield
  }}
}}
"""


def permuted(v: ir.Value, perm: list[int]) -> ir.Value:
    """`v` with its dims permuted (result dim i is v's dim perm[i]), as a generic fusion can fold."""
    from torch_mlir.dialects import linalg, tensor

    from tidal.conversion.scf_builders import dim_size

    t = ir.RankedTensorType(v.type)
    out = tensor.EmptyOp([dim_size(v, d) if t.is_dynamic_dim(d) else t.shape[d] for d in perm], t.element_type).result
    rank = t.rank
    read = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(perm.index(d)) for d in range(rank)])
    identity = ir.AffineMap.get_identity(rank)
    generic = linalg.GenericOp([out.type], [v], [out], ir.ArrayAttr.get([ir.AffineMapAttr.get(read), ir.AffineMapAttr.get(identity)]),
                               ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank))
    block = generic.regions[0].blocks.append(t.element_type, t.element_type)
    with ir.InsertionPoint(block):
        linalg.YieldOp([block.arguments[0]])
    return generic.result


@tidal_pass("tidal-transposes-to-generics", "Turn linalg.transpose ops read only by generics into generics (so fusion folds them)")
def transposes_to_generics(module_op):
    for op in ops_named(module_op, ("linalg.transpose",)):
        users = [u.owner.operation.name for u in op.results[0].uses]
        if not users or any(name != "linalg.generic" for name in users):
            continue
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        with ir.InsertionPoint(op), op.location:
            op.results[0].replace_all_uses_with(permuted(op.operands[0], perm))
        op.erase()


def _tiled_dim(op) -> int | None:
    """For an elementwise generic over static 32-bit values whose output is written in identity
    order and whose inputs are read through permutations (or broadcasts) that agree on one other
    innermost dim: that dim; with no input read transposed and short rows: the innermost dim.
    None for anything else (not tileable, or better left to LLVM)."""
    if op.name == "linalg.transpose":
        return _transpose_dim(op)
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    if any("parallel" not in str(t) for t in op.attributes["iterator_types"]):
        return None
    if any(inner.operation.name.split(".")[0] not in ("arith", "math") for inner in op.regions[0].blocks[0].operations
           if inner.operation.name != "linalg.yield"):
        return None
    values = [*op.operands, *op.results]
    if not all(isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape for v in values):
        return None
    if any(str(ir.ShapedType(v.type).element_type) not in ("f32", "i32") for v in values):
        return None  # the shuffles are for 16 lanes of 32 bits
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    out = ir.RankedTensorType(op.results[0].type)
    rank = out.rank
    if rank < 2 or maps[-1] != ir.AffineMap.get_identity(rank):
        return None
    inner = set()
    for m in maps[:-1]:
        dims = map_dims(m)
        if dims is None:
            return None
        dims = [d for d in dims if d is not None]  # the loop dims it reads, in its order
        if len(set(dims)) != len(dims):
            return None
        if rank - 1 in dims and dims[-1] != rank - 1:
            inner.add(dims[-1])  # read transposed: its contiguous dim is another one
    if len(inner) > 1:
        return None
    inner_in = inner.pop() if inner else rank - 1  # no transposed input: rows of TILE lanes
    if out.shape[inner_in] % TILE or out.shape[rank - 1] % TILE:
        return None  # a partial tile would need masked vectors
    if inner_in == rank - 1 and (out.shape[rank - 1] > MAX_ROW or math.prod(out.shape) < MIN_ROWS_ELEMENTS):
        return None  # long rows: LLVM's loop vectorizer; smaller ops: tidal-parallelize-generics' groups
    return inner_in


def _transpose_dim(op) -> int | None:
    """A `linalg.transpose`: output dim j reads input dim permutation[j]."""
    src, dst = op.operands[0].type, op.results[0].type
    if not (isinstance(src, ir.RankedTensorType) and src.has_static_shape and ir.RankedTensorType(dst).has_static_shape):
        return None
    if str(ir.ShapedType(src).element_type) not in ("f32", "i32"):
        return None
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    rank = len(perm)
    inner_in = perm.index(rank - 1)
    shape = ir.RankedTensorType(dst).shape
    if inner_in == rank - 1 or shape[inner_in] % TILE or shape[rank - 1] % TILE:
        return None
    return inner_in


def _read_without_unit_dims(op, i: int) -> None:
    """Operand `i` of a generic to tile, when it is a tensor.expand_shape that only adds size-1 dims
    (a per-channel scale viewed as [1, C, 1, 1]) read as constant 0 there: read its source instead,
    through the map without those results. The vectorizer then reads the scale as one vector along
    the dim it varies in and broadcasts it over the tile's rows; through the 4-D view it read
    16 scalars and transposed them with the input, a shuffle sequence whose tile went through the
    stack (GroupNorm's affine fused into the NCHW->NHWC permute before a channels-last
    convolution: 253 us in one process, 139 in another, by where the stack fell against the
    buffers)."""
    v = op.operands[i]
    expand = v.owner
    if isinstance(expand, ir.Block) or expand.name != "tensor.expand_shape":
        return
    source = expand.operands[0]
    full, src = ir.RankedTensorType(v.type).shape, ir.RankedTensorType(source.type).shape
    maps = list(op.attributes["indexing_maps"])
    m = ir.AffineMapAttr(maps[i]).value
    dims = map_dims(m)
    if dims is None:
        return
    kept = [k for k, d in enumerate(dims) if not (d is None and full[k] == 1)]
    if [full[k] for k in kept] != list(src):
        return  # it adds something other than unit dims read as 0
    maps[i] = ir.AffineMapAttr.get(ir.AffineMap.get(m.n_dims, m.n_symbols, [m.results[k] for k in kept]))
    op.operands[i] = source
    op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)


@tidal_pass("tidal-tile-elementwise", "Run static elementwise generics in vector tiles: 16x16 with a transposed input, rows of 16 lanes otherwise (transform dialect), before bufferization")
def tile_elementwise(module_op):
    shapes: set[tuple[int, int]] = set()  # (rank, tiled input dim): one script each

    def mark(op):
        # at a function's top level only: the tiles' parallel loop inside a loop body would start
        # the thread team on every iteration (tidal-parallelize-generics leaves those alone too)
        parent = op.parent
        dim = _tiled_dim(op) if parent is not None and parent.operation.name == "func.func" else None
        if dim is not None:
            rank = ir.RankedTensorType(op.results[0].type).rank
            op.attributes[_MARK] = ir.DenseI64ArrayAttr.get([rank, dim])  # a script tiles one rank
            if op.name == "linalg.generic":
                for i in range(len(op.operands) - 1):
                    _read_without_unit_dims(op, i)
            shapes.add((rank, dim))
        return ir.WalkResult.ADVANCE

    module_op.walk(mark)
    for rank, dim in sorted(shapes):
        script = ir.Module.parse(_script(rank, dim))
        interpreter.apply_named_sequence(module_op, script.body.operations[0], script)
