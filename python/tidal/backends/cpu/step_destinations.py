"""`tidal-write-steps-in-place`: an op that computes into a fresh buffer only to copy it into a
slice of another computes into that slice, where none of its inputs can overlap the slice.

A scan's step reads the previous step's slice of its stacked result and writes the next one:
`out[t] = combine(out[t-1], x[t])`. One-Shot Bufferize cannot tell the two slices of `out`
apart (they differ by a dynamic offset), so it writes the step into a temporary and copies it
into `out[t]`: a store and a copy of every element at every step (a linear recurrence over
[4, 4096, 256], 1 thread: 3.2 ms, 0.89 for one elementwise op of the same traffic). After
bufferization this pass takes `linalg.generic ... outs(%tmp)` followed by `memref.copy %tmp, %dst`
with `%tmp` a `memref.alloc` used by nothing else, and makes `%dst` the generic's output when
every input is provably another buffer (a different allocation, or an argument where `%dst` lies
in an allocation) or a slice of `%dst`'s buffer disjoint from it (in some dim, offsets that differ
by a constant at least the earlier slice's size). The generic must not read its output's
initial value (a temporary's would be undefined anyway). Anything else is left to the copy.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass

_DYNAMIC = -(2**63)  # ShapedType::kDynamic in static_offsets / static_sizes
# ops that may sit between the generic and the copy: they touch no memory
_PURE = ("memref.subview", "arith.constant", "arith.addi", "arith.subi", "arith.muli", "affine.apply")


def _owner(value: ir.Value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _subviews(value: ir.Value) -> tuple[ir.Value, list]:
    """(the buffer under a chain of memref.subviews, the subview ops from the outermost in)."""
    chain = []
    op = _owner(value)
    while op is not None and op.name == "memref.subview":
        chain.append(op)
        value = op.operands[0]
        op = _owner(value)
    return value, chain[::-1]


def _base(value: ir.Value) -> ir.Value:
    """The buffer a view or a loop's iteration argument stands for: through subviews, and through
    an scf.for's iteration argument to its initial value where the loop yields that argument's
    buffer back (bufferized in place)."""
    while True:
        value, _ = _subviews(value)
        block = value.owner
        if not isinstance(block, ir.Block):
            return value
        loop = block.owner
        if loop is None or loop.operation.name != "scf.for" or value.arg_number == 0:
            return value
        i = value.arg_number - 1
        if _subviews(list(block.operations)[-1].operands[i])[0] != value:
            return value
        value = loop.operands[3 + i]


def _kind(base: ir.Value) -> str:
    """'alloc' (a buffer this function made), 'arg' (the caller's) or 'unknown'."""
    owner = base.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        return "arg" if parent is not None and parent.operation.name == "func.func" else "unknown"
    return "alloc" if owner.operation.name == "memref.alloc" else "unknown"


def _slice(op) -> tuple[list, list, list]:
    """(offsets, sizes, strides) of a subview, each an int or an ir.Value."""
    dyn = iter(op.operands[1:])
    lists = []
    for name in ("static_offsets", "static_sizes", "static_strides"):
        lists.append([next(dyn) if v == _DYNAMIC else v for v in ir.DenseI64ArrayAttr(op.attributes[name])])
    return tuple(lists)


def _constant(value) -> int | None:
    if isinstance(value, int):
        return value
    op = _owner(value)
    if op is not None and op.name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
        return ir.IntegerAttr(op.attributes["value"]).value
    return None


def _difference(a, b) -> int | None:
    """b - a when it is a constant (both constants, or b = a ± c through arith.addi / subi)."""
    ca, cb = _constant(a), _constant(b)
    if ca is not None and cb is not None:
        return cb - ca
    for x, y, sign in ((a, b, 1), (b, a, -1)):
        op = None if isinstance(y, int) else _owner(y)
        if op is not None and op.name in ("arith.addi", "arith.subi"):
            lhs, rhs = op.operands
            c = _constant(rhs)
            if c is not None and lhs == x:
                return sign * (c if op.name == "arith.addi" else -c)
            if op.name == "arith.addi" and _constant(lhs) is not None and rhs == x:
                return sign * _constant(lhs)
    if not isinstance(a, int) and not isinstance(b, int) and a == b:
        return 0
    return None


def _disjoint(first, second) -> bool:
    """Two single subviews of one buffer, unit strides, that share no element."""
    (o1, s1, t1), (o2, s2, t2) = _slice(first), _slice(second)
    if any(t != 1 for t in t1 + t2) or len(o1) != len(o2):
        return False
    for a, b, size_a, size_b in zip(o1, o2, s1, s2):
        d = _difference(a, b)
        if d is None or not isinstance(size_a, int) or not isinstance(size_b, int):
            continue
        if d >= size_a or -d >= size_b:
            return True
    return False


def _apart(value: ir.Value, dst: ir.Value) -> bool:
    """Whether the buffer `value` cannot overlap `dst` (a subview of an allocation)."""
    base, dst_base = _base(value), _base(dst)
    kind = _kind(base)
    if base != dst_base:
        return kind in ("alloc", "arg") and _kind(dst_base) == "alloc"
    (_, chain), (_, dst_chain) = _subviews(value), _subviews(dst)
    return len(chain) == 1 and len(dst_chain) == 1 and _disjoint(chain[0], dst_chain[0])


def _operands_ready(view, generic) -> bool:
    """The view's operands are defined before the generic: in an enclosing region, or earlier in
    the generic's block."""
    for v in view.operands:
        owner = v.owner
        if isinstance(owner, ir.Block):
            continue
        if owner.operation.block == generic.block and not owner.operation.is_before_in_block(generic):
            return False
    return True


@tidal_pass("tidal-write-steps-in-place", "Compute into the slice a temporary is copied to, where no input can overlap it")
def write_steps_in_place(module_op):
    for copy in ops_named(module_op, ("memref.copy",)):
        copy = copy.operation
        tmp, dst = copy.operands
        alloc = _owner(tmp)
        if alloc is None or alloc.name != "memref.alloc" or alloc.block != copy.block:
            continue
        users = [u.owner.operation for u in tmp.uses]
        generics = [u for u in users if u.name == "linalg.generic"]
        if len(users) != 2 or len(generics) != 1 or generics[0].block != copy.block or \
                not generics[0].is_before_in_block(copy):
            continue
        generic = generics[0]
        n_in, n_out = ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"])
        if n_out != 1 or generic.operands[n_in] != tmp or any(generic.operands[i] == tmp for i in range(n_in)):
            continue  # one output, the temporary (an input too would make it read)
        ops = list(copy.block.operations)
        between = ops[ops.index(generic) + 1 : ops.index(copy)]
        if any(op.name not in _PURE for op in between):
            continue  # something between might read or write the destination's old contents
        body = generic.regions[0].blocks[0]
        if len(list(body.arguments[n_in].uses)):
            continue  # reads its output's initial value
        if not all(_apart(v, dst) for v in list(generic.operands)[:n_in]):
            continue
        view = _owner(dst)
        if view is None or view.name != "memref.subview" or view.block != copy.block:
            continue
        if not _operands_ready(view, generic):
            continue
        view.move_before(generic)
        generic.operands[n_in] = dst
        copy.erase()
        alloc.erase()


# ops a scan's loop may hold besides its step's generic for its rows to be walked one at a time
_INDEXING = ("memref.subview", "arith.constant", "arith.addi", "arith.subi", "arith.muli", "affine.apply", "scf.yield")


def _strided_rows(op, positions, sizes) -> bool:
    """Some operand's rows (d0) lie apart in memory, further than a row's elements span: the step
    slices [B, D] out of [B, T, D]."""
    for v, p in zip(op.operands, positions):
        if p is None:
            continue
        t = ir.MemRefType(v.type)
        strides, _ = t.get_strides_and_offset()
        span = 1
        for k in range(p + 1, t.rank):
            span *= t.get_dim_size(k)
        if strides[p] > span:
            return True
    return False


def _fixed_rows(v: ir.Value, position: int, loop) -> bool:
    """Row `position` of the view `v` is the same row of the same buffer at every iteration of
    `loop`: `v` is a subview, at static offset 0 in that dim, of a buffer defined outside the
    loop (a view whose rows moved with the iteration would mix rows of different steps)."""
    view = _owner(v)
    if view is None or view.name != "memref.subview":
        return False
    owner = view.operands[0].owner
    scope = owner.owner if isinstance(owner, ir.Block) else owner
    while scope is not None:  # the source's definition, or the op whose block defines it
        scope = scope.operation
        if scope == loop:
            return False
        scope = scope.parent
    offsets, sizes, _ = _slice(view)
    kept = [k for k, size in enumerate(sizes) if size != 1]
    rank = ir.MemRefType(v.type).rank
    if len(kept) != rank:
        return False  # unit dims kept and dropped alike: which source dim is row `position` is ambiguous
    return offsets[kept[position]] == 0


@tidal_pass("tidal-walk-scan-rows", "Walk each row of a scan's strided step slices through all steps in turn (rows outermost)")
def walk_scan_rows(module_op):
    """`tidal-walk-scan-rows`: a scan whose step is one elementwise generic over [B, D] slices of
    [B, T, D] buffers walks each row b through every step before the next row.

    Scanned along T, step t reads and writes B rows of D elements lying T·D apart: every array is
    B streams advancing D elements a step (a linear recurrence over [4, 4096, 256]: 12 streams of
    1 KiB). The step's elements never mix (identity maps, parallel iterators), so its loop can
    run inside a loop over the rows, each step a [1, D] generic: one contiguous stream per array.
    Taken on a bufferized `scf.for` without results whose body is views, index arithmetic and
    that one generic, where some operand's rows are further apart than a row is long (a scan over
    the leading dim, whose [B, D] slices are contiguous, is left as it is)."""
    from torch_mlir.dialects import arith as arith_d, scf as scf_d

    from tidal.backends.cpu.parallel_generics import _chunk, _d0_positions, _loop_sizes

    for loop in ops_named(module_op, ("scf.for",)):
        loop = loop.operation
        if len(loop.results):
            continue
        body = list(loop.regions[0].blocks[0].operations)
        generics = [op for op in body if op.name == "linalg.generic"]
        if len(generics) != 1 or any(op.name not in _INDEXING and op.name != "linalg.generic" for op in body):
            continue
        generic = generics[0]
        if not all(isinstance(v.type, ir.MemRefType) for v in generic.operands) or ops_named(generic, ("linalg.index",)):
            continue
        if not all("parallel" in str(it) for it in ir.ArrayAttr(generic.attributes["iterator_types"])):
            continue
        positions, sizes = _d0_positions(generic), _loop_sizes(generic)
        n_in, _ = ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"])
        if positions is None or sizes is None or sizes[0] < 2 or any(p is None for p in positions[n_in:]):
            continue
        if not _strided_rows(generic, positions, sizes) or \
                not all(p is None or _fixed_rows(v, p, loop) for v, p in zip(generic.operands, positions)):
            continue
        with loop.location, ir.InsertionPoint(loop):
            index = ir.IndexType.get()
            rows = scf_d.ForOp(arith_d.ConstantOp(index, 0).result, arith_d.ConstantOp(index, sizes[0]).result,
                               arith_d.ConstantOp(index, 1).result, [])
            with ir.InsertionPoint(rows.body):
                end = scf_d.YieldOp([])
        loop.move_before(end.operation)
        with generic.location, ir.InsertionPoint(generic):
            for i, (v, p) in enumerate(zip(list(generic.operands), positions)):
                if p is not None:
                    generic.operands[i] = _chunk(v, p, rows.induction_variable, 1)
