"""`tidal-parallelize-generics`: a large bufferized `linalg.generic` at a function's top level
runs on the threads torch allows, split along its outermost parallel dim.

Its iterations along d0 are cut into one chunk per thread (`omp_get_max_threads()` at run time);
each chunk is the same generic over subviews of the operands that d0 indexes (operands d0 does
not index, broadcast along it, are read whole), in an `scf.forall` that
`tidal-forall-to-threads` then starts on torch's OpenMP team. With one thread allowed the op runs
as it was (no team started). Straight-line code (an MLP's GELU and LayerNorm, a conv block's
GroupNorm and SiLU, the permutes around channels-last convolutions) otherwise ran on one core
while eager, Inductor and the BLAS/oneDNN calls around it used two.

Left alone: generics inside loops (a team started per step costs more than a step's small ops),
ones reading `linalg.index` (chunks would see shifted indices), d0 used other than as a plain
dim, dynamic sizes, and ops under `MIN_ELEMENTS` iterations.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, func, memref, scf

from tidal.passes.registry import ops_named, tidal_pass

MIN_ELEMENTS = 16384  # below this, starting the team costs about what the split saves


def _uses_d0(e) -> bool:
    e = e.maybe_downcast()
    if isinstance(e, ir.AffineDimExpr):
        return e.position == 0
    if isinstance(e, ir.AffineBinaryExpr):
        return _uses_d0(e.lhs) or _uses_d0(e.rhs)
    return False


def _d0_positions(op: ir.Operation) -> list[int | None] | None:
    """Per operand, the result position of its map that is exactly d0 (None: d0 not used);
    None overall when d0 appears inside a compound expression (a convolution's h + kh)."""
    positions = []
    for attr in ir.ArrayAttr(op.attributes["indexing_maps"]):
        found = None
        for p, e in enumerate(ir.AffineMapAttr(attr).value.results):
            if isinstance(e.maybe_downcast(), ir.AffineDimExpr) and ir.AffineDimExpr(e).position == 0:
                found = p
            elif _uses_d0(e):
                return None
        positions.append(found)
    return positions


def _loop_sizes(op: ir.Operation) -> list[int] | None:
    """Static size of every loop dim, from the operands' shapes (None if one is unknown)."""
    sizes: dict[int, int] = {}
    for v, attr in zip(op.operands, ir.ArrayAttr(op.attributes["indexing_maps"])):
        t = ir.MemRefType(v.type)
        for p, e in enumerate(ir.AffineMapAttr(attr).value.results):
            if isinstance(e.maybe_downcast(), ir.AffineDimExpr) and not t.is_dynamic_dim(p):
                sizes[ir.AffineDimExpr(e).position] = t.get_dim_size(p)
    rank = len(ir.ArrayAttr(op.attributes["iterator_types"]))
    return [sizes[d] for d in range(rank)] if len(sizes) == rank else None


def _eligible(op: ir.Operation) -> list[int | None] | None:
    if op.name != "linalg.generic" or len(op.results) or not all(isinstance(v.type, ir.MemRefType) for v in op.operands):
        return None
    iterators = ir.ArrayAttr(op.attributes["iterator_types"])
    if not len(iterators) or "parallel" not in str(iterators[0]):
        return None  # 0-d, or a reduction outermost
    sizes = _loop_sizes(op)
    positions = _d0_positions(op)
    if ops_named(op, ("linalg.index",)) or sizes is None or positions is None or sizes[0] < 2:
        return None
    n_in = len(op.opview.inputs)
    if any(p is None for p in positions[n_in:]):
        return None  # every output is indexed by d0: the chunks write disjoint parts
    total = 1
    for s in sizes:
        total *= s
    return positions if total >= MIN_ELEMENTS else None


def _chunk(v: ir.Value, position: int, start: ir.Value, size: ir.Value) -> ir.Value:
    """`v`'s rows [start, start + size) along `position`, as a strided subview."""
    t = ir.MemRefType(v.type)
    strides, _ = t.get_strides_and_offset()
    dyn = ir.ShapedType.get_dynamic_size()
    shape = [dyn if k == position else t.get_dim_size(k) for k in range(t.rank)]
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), strides)
    result = ir.MemRefType.get(shape, t.element_type, layout)
    offsets = [dyn if k == position else 0 for k in range(t.rank)]
    return memref.SubViewOp(result, v, [start], [size], [], offsets, shape, [1] * t.rank).result


def _parallelize(op: ir.Operation, positions: list[int | None], max_threads: ir.FlatSymbolRefAttr) -> None:
    index = ir.IndexType.get()
    rows = _loop_sizes(op)[0]
    with ir.InsertionPoint(op), op.location:
        threads = arith.IndexCastOp(index, func.CallOp([ir.IntegerType.get_signless(32)], max_threads, []).result).result
        one = arith.ConstantOp(index, 1).result
        n = arith.ConstantOp(index, rows).result
        split = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.sgt, threads, one).result, [], has_else=True)
        with ir.InsertionPoint(split.then_block):
            chunk = arith.CeilDivSIOp(n, threads).result
            count = arith.CeilDivSIOp(n, chunk).result
            forall = scf.ForallOp([0], [count], [1], [])
            with ir.InsertionPoint(forall.body):
                start = arith.MulIOp(forall.induction_variables[0], chunk).result
                size = arith.MinSIOp(chunk, arith.SubIOp(n, start).result).result
                chunks = [None if p is None else _chunk(v, p, start, size) for v, p in zip(list(op.operands), positions)]
                piece = op.clone(ip=ir.InsertionPoint(forall.body))
                for i, c in enumerate(chunks):
                    if c is not None:
                        piece.operands[i] = c
                scf.InParallelOp()
            scf.YieldOp([])
        with ir.InsertionPoint(split.else_block):
            scf.YieldOp([])
    op.move_before(split.else_block.operations[0])


@tidal_pass("tidal-parallelize-generics", "Large top-level generics split along d0 into an scf.forall over the threads")
def parallelize_generics(module_op):
    from tidal.backends.threads import ensure_runtime_decl

    work = []
    for fn in module_op.regions[0].blocks[0].operations:
        if fn.operation.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        for op in fn.regions[0].blocks[0].operations:
            positions = _eligible(op.operation)
            if positions is not None:
                work.append((op.operation, positions))
    if work:
        max_threads = ensure_runtime_decl(module_op, "omp_get_max_threads")
        for op, positions in work:
            _parallelize(op, positions, max_threads)
