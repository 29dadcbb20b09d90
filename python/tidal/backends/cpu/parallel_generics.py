"""`tidal-parallelize-generics`: large bufferized `linalg.generic`s at a function's top level
run on the threads torch allows, split along their outermost parallel dim.

Its iterations along d0 are cut into one chunk per thread (`omp_get_max_threads()` at run time);
each chunk is the same generic over subviews of the operands that d0 indexes (operands d0 does
not index, broadcast along it, are read whole), in an `scf.forall` that
`tidal-forall-to-threads` then starts on torch's OpenMP team. With one thread allowed the op runs
as it was (no team started). Straight-line code (an MLP's GELU and LayerNorm, a conv block's
GroupNorm and SiLU, the permutes around channels-last convolutions) otherwise ran on one core
while eager, Inductor and the BLAS/oneDNN calls around it used two.

Consecutive such generics over the same rows (a softmax's five ops and the fills of its
accumulators, a LayerNorm's passes) form one group in one forall: each thread runs its rows of
every member in order, so the team starts once (attention [4,64,32] at 2 threads: 0.049 -> 0.044
ms; five starts cost more than the split saved). A group needs MIN_ELEMENTS iterations in all;
it ends where a member would read rows another thread writes (a buffer some member writes must
be chunked along its leading dim by every member touching it) or at any op other than an
allocation, a constant, a view or a deallocation (moved before or after the group).

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


def _splittable(op: ir.Operation) -> tuple[list[int | None], int, int] | None:
    """(d0's position in each operand, d0's size, iterations) for a generic that can run in
    chunks of d0; None otherwise."""
    if op.name == "linalg.fill":
        return _splittable_fill(op)
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
    for size in sizes:
        total *= size
    return positions, sizes[0], total


def _splittable_fill(op: ir.Operation) -> tuple[list[int | None], int, int] | None:
    """A fill of a static buffer (a reduction's accumulator between a softmax's generics)."""
    if len(op.results) or not isinstance(op.operands[1].type, ir.MemRefType):
        return None
    t = ir.MemRefType(op.operands[1].type)
    if not t.rank or not t.has_static_shape or t.get_dim_size(0) < 2:
        return None
    total = 1
    for d in range(t.rank):
        total *= t.get_dim_size(d)
    return [None, 0], t.get_dim_size(0), total


def _chunk(v: ir.Value, position: int, start: ir.Value, size: ir.Value | int) -> ir.Value:
    """`v`'s rows [start, start + size) along `position`, as a strided subview (of a static
    number of rows where `size` is an int)."""
    t = ir.MemRefType(v.type)
    strides, _ = t.get_strides_and_offset()
    dyn = ir.ShapedType.get_dynamic_size()
    rows = size if isinstance(size, int) else dyn
    shape = [rows if k == position else t.get_dim_size(k) for k in range(t.rank)]
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), strides)
    result = ir.MemRefType.get(shape, t.element_type, layout)
    offsets = [dyn if k == position else 0 for k in range(t.rank)]
    sizes = [] if isinstance(size, int) else [size]
    return memref.SubViewOp(result, v, [start], sizes, [], offsets, shape, [1] * t.rank).result


# Ops that may sit between the members of a group: they move before it (allocations, constants,
# views of buffers defined before it) or after it (deallocations), and touch no data.
_MOVED_BEFORE = ("memref.alloc", "arith.constant", "memref.expand_shape", "memref.collapse_shape", "memref.cast")
_VIEWS = ("memref.expand_shape", "memref.collapse_shape", "memref.cast")


def _root(v: ir.Value) -> tuple[ir.Value, bool]:
    """The buffer `v` is a view of, and whether every view on the way keeps its leading dim."""
    keeps = True
    while not isinstance(v.owner, ir.Block) and v.owner.operation.name in _VIEWS:
        owner = v.owner.operation
        if owner.name != "memref.cast":
            groups = ir.ArrayAttr(owner.attributes["reassociation"])  # empty to or from a 0-d buffer
            first = [ir.IntegerAttr(i).value for i in ir.ArrayAttr(groups[0])] if len(groups) else []
            keeps = keeps and first == [0]
        v = owner.operands[0]
    return v, keeps


def _known_buffer(v: ir.Value) -> bool:
    """An argument or an allocation: two such values are the same buffer exactly when equal.
    Anything else (a subview, a transposed view) may overlap buffers it does not name."""
    return isinstance(v.owner, ir.Block) or v.owner.operation.name in ("memref.alloc", "memref.get_global")


class _Group:
    """Consecutive splittable generics over the same rows, run as one chunk per thread each: a
    thread runs its rows of every member in order, so one team start serves them all (a softmax
    is five generics). A buffer that a member writes and another touches must be chunked along
    its leading dim by both (then a thread only ever reads rows it wrote itself)."""

    def __init__(self, rows: int):
        self.rows = rows
        self.members: list[tuple[ir.Operation, list[int | None]]] = []
        self.before: list[ir.Operation] = []
        self.after: list[ir.Operation] = []
        self.iterations = 0
        self.accesses: list[tuple[ir.Value, bool, bool]] = []  # (root, chunked by rows, written)

    def _accesses(self, op, positions):
        n_in = len(op.operands) - 1 if op.name == "linalg.fill" else len(op.opview.inputs)
        out = []
        for i, (v, p) in enumerate(zip(op.operands, positions)):
            if not isinstance(v.type, ir.MemRefType):
                continue  # a fill's scalar
            root, keeps = _root(v)
            t = ir.MemRefType(root.type)
            chunked = p == 0 and keeps and t.rank > 0 and not t.is_dynamic_dim(0) and t.get_dim_size(0) == self.rows
            out.append((root, chunked, i >= n_in))
        return out

    def accepts(self, op, positions, rows) -> bool:
        if rows != self.rows:
            return False
        if not self.members:
            return True
        new = self._accesses(op, positions)
        for root, chunked, written in new:
            for other, other_chunked, other_written in self.accesses:
                if not (written or other_written):
                    continue
                if not (_known_buffer(root) and _known_buffer(other)):
                    return False
                if other == root and not (chunked and other_chunked):
                    return False
        return True

    def add(self, op, positions, iterations):
        self.accesses += self._accesses(op, positions)
        self.members.append((op, positions))
        self.iterations += iterations


def _groups(block) -> list[_Group]:
    groups, current, pending = [], None, []

    def close():
        nonlocal current, pending
        if current is not None and current.members:
            groups.append(current)
        current, pending = None, []

    for op in list(block.operations):
        op = op.operation
        split = _splittable(op)
        if split is not None:
            positions, rows, iterations = split
            if current is not None and current.accepts(op, positions, rows):
                current.before += [o for o in pending if o.name != "memref.dealloc"]
                current.after += [o for o in pending if o.name == "memref.dealloc"]
                pending = []
            else:
                close()
                current = _Group(rows)
            current.add(op, positions, iterations)
        elif current is not None and (op.name == "memref.dealloc" or op.name in _MOVED_BEFORE):
            pending.append(op)
        else:
            close()
    close()
    return [g for g in groups if g.iterations >= MIN_ELEMENTS]


def _parallelize(group: _Group, max_threads: ir.FlatSymbolRefAttr) -> None:
    index = ir.IndexType.get()
    first = group.members[0][0]
    for op in group.before:
        op.move_before(first)
    with ir.InsertionPoint(first), first.location:
        threads = arith.IndexCastOp(index, func.CallOp([ir.IntegerType.get_signless(32)], max_threads, []).result).result
        one = arith.ConstantOp(index, 1).result
        n = arith.ConstantOp(index, group.rows).result
        split = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.sgt, threads, one).result, [], has_else=True)
        with ir.InsertionPoint(split.then_block):
            chunk = arith.CeilDivSIOp(n, threads).result
            count = arith.CeilDivSIOp(n, chunk).result
            forall = scf.ForallOp([0], [count], [1], [])
            with ir.InsertionPoint(forall.body):
                start = arith.MulIOp(forall.induction_variables[0], chunk).result
                size = arith.MinSIOp(chunk, arith.SubIOp(n, start).result).result
                for op, positions in group.members:
                    chunks = [None if p is None else _chunk(v, p, start, size) for v, p in zip(list(op.operands), positions)]
                    piece = op.clone(ip=ir.InsertionPoint(forall.body))
                    for i, c in enumerate(chunks):
                        if c is not None:
                            piece.operands[i] = c
                scf.InParallelOp()
            scf.YieldOp([])
        with ir.InsertionPoint(split.else_block):
            scf.YieldOp([])
    (done,) = split.else_block.operations
    for op, _ in group.members:
        op.move_before(done)
    anchor = split.operation
    for op in group.after:
        op.move_after(anchor)
        anchor = op


@tidal_pass("tidal-parallelize-generics", "Large top-level generics split along d0 into an scf.forall over the threads")
def parallelize_generics(module_op):
    from tidal.backends.cpu.threads import ensure_runtime_decl

    work = []
    for fn in module_op.regions[0].blocks[0].operations:
        if fn.operation.name == "func.func" and len(fn.regions[0].blocks):
            work += _groups(fn.regions[0].blocks[0])
    if work:
        max_threads = ensure_runtime_decl(module_op, "omp_get_max_threads")
        for group in work:
            _parallelize(group, max_threads)
