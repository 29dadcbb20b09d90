"""Small IR-building helpers shared by the per-op `lower-to-scf` rules (`tidal_to_scf/`).

Tidal regions are isolated from above, so lowering a tidal op to scf is substitution: each body's
block arguments are replaced by the values scf provides (loop-carried args, slices, the op's
operands) and the body's ops are moved into the scf region.
"""

from __future__ import annotations

from typing import Sequence

from torch_mlir import ir
from torch_mlir.dialects import arith, tensor

from tidal.dialects.registry import YIELD


def index(v: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), v).result


def dim_size(value: ir.Value, dim: int) -> ir.Value:
    t = value.type
    if not t.is_dynamic_dim(dim):
        return index(t.get_dim_size(dim))
    return tensor.dim(value, index(dim))


def minus_one(v: ir.Value) -> ir.Value:
    return arith.SubIOp(v, index(1)).result


def step_index(i: ir.Value, length: ir.Value, reverse: bool) -> ir.Value:
    """The position processed at step `i`: i, or length-1-i when scanning in reverse."""
    if not reverse:
        return i
    last = arith.SubIOp(length, index(1)).result
    return arith.SubIOp(last, i).result


def _slice_geometry(full: ir.Value, dim: int, at: ir.Value):
    t = full.type
    rank = t.rank
    dyn = ir.ShapedType.get_dynamic_size()
    offsets, static_offsets = [at], [dyn if k == dim else 0 for k in range(rank)]
    sizes, static_sizes = [], []
    for k in range(rank):
        if k == dim:
            static_sizes.append(1)
        elif t.is_dynamic_dim(k):
            sizes.append(tensor.dim(full, index(k)))
            static_sizes.append(dyn)
        else:
            static_sizes.append(t.get_dim_size(k))
    return offsets, sizes, static_offsets, static_sizes, [1] * rank


def _holds_nothing(full: ir.Value, dim: int) -> bool:
    """Whether every slice of `full` along `dim` is empty (another dim is a static 0). MLIR's
    slice verifier calls the offset 0 of a 0-size dim out of bounds, so such slices are never
    made: an extracted one is a new empty tensor, an inserted one changes nothing."""
    t = full.type
    return any(k != dim and not t.is_dynamic_dim(k) and t.get_dim_size(k) == 0 for k in range(t.rank))


def _empty(result_type: ir.Type, dynamic_sizes: list[ir.Value]) -> ir.Value:
    t = ir.RankedTensorType(result_type)
    dynamic = iter(dynamic_sizes)
    return tensor.EmptyOp([next(dynamic) if t.is_dynamic_dim(k) else t.get_dim_size(k) for k in range(t.rank)],
                          t.element_type).result


def extract_step(full: ir.Value, dim: int, at: ir.Value, slice_type: ir.Type) -> ir.Value:
    """`full[..., at, ...]` along `dim`, with `dim` dropped (a rank-reducing extract_slice)."""
    offsets, sizes, so, ss, st = _slice_geometry(full, dim, at)
    if _holds_nothing(full, dim):
        return _empty(slice_type, sizes)
    return tensor.extract_slice(slice_type, full, offsets, sizes, [], so, ss, st)


def insert_step(part: ir.Value, full: ir.Value, dim: int, at: ir.Value) -> ir.Value:
    """`full` with `part` written at position `at` along `dim`."""
    if _holds_nothing(full, dim):
        return full
    offsets, sizes, so, ss, st = _slice_geometry(full, dim, at)
    return tensor.insert_slice(part, full, offsets, sizes, [], so, ss, st)


def _range_geometry(full: ir.Value, dim: int, start: ir.Value, count: ir.Value):
    """Positions [start, start + count) along `dim`, the other dims whole."""
    t = full.type
    dyn = ir.ShapedType.get_dynamic_size()
    sizes, static_sizes = [], []
    for k in range(t.rank):
        if k == dim:
            sizes.append(count)
            static_sizes.append(dyn)
        elif t.is_dynamic_dim(k):
            sizes.append(tensor.dim(full, index(k)))
            static_sizes.append(dyn)
        else:
            static_sizes.append(t.get_dim_size(k))
    static_offsets = [dyn if k == dim else 0 for k in range(t.rank)]
    return [start], sizes, static_offsets, static_sizes, [1] * t.rank


def range_type(full_type: ir.Type, dim: int) -> ir.Type:
    """`full_type` with `dim` dynamic: the type of a range of positions along it."""
    shape = [ir.ShapedType.get_dynamic_size() if k == dim else full_type.get_dim_size(k) if not full_type.is_dynamic_dim(k)
             else ir.ShapedType.get_dynamic_size() for k in range(full_type.rank)]
    return ir.RankedTensorType.get(shape, full_type.element_type)


def extract_range(full: ir.Value, dim: int, start: ir.Value, count: ir.Value) -> ir.Value:
    """`full[..., start:start+count, ...]` along `dim` (rank kept, `dim` dynamic)."""
    offsets, sizes, so, ss, st = _range_geometry(full, dim, start, count)
    if _holds_nothing(full, dim):
        return _empty(range_type(full.type, dim), sizes)
    return tensor.extract_slice(range_type(full.type, dim), full, offsets, sizes, [], so, ss, st)


def _outside_in_parallel():
    """Where a `scf.forall.in_parallel` block's slice sizes are computed: before the in_parallel
    op (its block holds only parallel inserts; a dynamic dim's tensor.dim goes there)."""
    return ir.InsertionPoint(ir.InsertionPoint.current.block.owner)


def parallel_insert_range(part: ir.Value, full: ir.Value, dim: int, start: ir.Value, count: ir.Value) -> None:
    """Inside `scf.forall.in_parallel`: write `part` over positions [start, start+count) of `full`."""
    if _holds_nothing(full, dim):
        return
    with _outside_in_parallel():
        offsets, sizes, so, ss, st = _range_geometry(full, dim, start, count)
    tensor.parallel_insert_slice(part, full, offsets, sizes, [], so, ss, st)


def parallel_insert_step(part: ir.Value, full: ir.Value, dim: int, at: ir.Value) -> None:
    """Inside `scf.forall.in_parallel`: write `part` at position `at` along `dim` of `full`."""
    if _holds_nothing(full, dim):
        return
    with _outside_in_parallel():
        offsets, sizes, so, ss, st = _slice_geometry(full, dim, at)
    tensor.parallel_insert_slice(part, full, offsets, sizes, [], so, ss, st)


def _rows_geometry(full: ir.Value, count: ir.Value):
    """Rows [0, count) of `full` along dim 0 (the other dims whole)."""
    t = full.type
    dyn = ir.ShapedType.get_dynamic_size()
    sizes, static_sizes = [count], [dyn]
    for k in range(1, t.rank):
        if t.is_dynamic_dim(k):
            sizes.append(tensor.dim(full, index(k)))
            static_sizes.append(dyn)
        else:
            static_sizes.append(t.get_dim_size(k))
    return [], sizes, [0] * t.rank, static_sizes, [1] * t.rank


def extract_rows(full: ir.Value, count: ir.Value, result_type: ir.Type) -> ir.Value:
    """`full[:count]` (a leading-dim prefix: contiguous in a row-major buffer)."""
    offsets, sizes, so, ss, st = _rows_geometry(full, count)
    if _holds_nothing(full, 0):
        return _empty(result_type, sizes)
    return tensor.extract_slice(result_type, full, offsets, sizes, [], so, ss, st)


def insert_rows(part: ir.Value, full: ir.Value, count: ir.Value) -> ir.Value:
    """`full` with `part` (`count` rows) written over its first rows."""
    if _holds_nothing(full, 0):
        return full
    offsets, sizes, so, ss, st = _rows_geometry(full, count)
    return tensor.insert_slice(part, full, offsets, sizes, [], so, ss, st)


def empty_like_stacked(result_type: ir.Type, length: ir.Value, dim: int, what: str, location,
                       size_of=None) -> ir.Value:
    """An uninitialized tensor for stacked per-step outputs. The stacked dim is `length`; another
    dynamic dim k is `size_of(k)` (an index computed before the loop, or None: unsupported)."""
    from tidal.diagnostics import TidalUnsupported

    sizes = []
    for k in range(result_type.rank):
        if result_type.is_dynamic_dim(k):
            size = length if k == dim else size_of(k) if size_of is not None else None
            if size is None:
                raise TidalUnsupported(
                    f"{what} has a dynamic per-step shape ({result_type}) that tidal cannot compute before "
                    f"the loop (from the op's operands); the CPU backend needs it to allocate the stacked result",
                    location,
                )
            sizes.append(size)
        else:
            sizes.append(result_type.get_dim_size(k))
    return tensor.EmptyOp(sizes, result_type.element_type).result


def slice_dim(d: int, dim: int) -> int:
    """The dim of a tensor that dim `d` of its slice along `dim` (`dim` dropped) is."""
    return d + (1 if d >= dim else 0)


def body_argument_dims(body: ir.Block, operands: Sequence[ir.Value], sliced: range, dim: int):
    """`reify_dim`'s `outer_dim` for a body whose argument i is operand i, a slice of it along
    `dim` for i in `sliced`."""
    args = list(body.arguments)

    def outer_dim(arg, d):
        if arg not in args:  # an argument of a block nested in the body
            return None
        i = args.index(arg)
        return dim_size(operands[i], slice_dim(d, dim) if i in sliced else d)

    return outer_dim


def stack_sizes(step_value: ir.Value, dim: int, outer_dim):
    """`empty_like_stacked`'s `size_of` for the stack along `dim` of a body's per-step value."""
    return lambda d: reify_dim(step_value, d - (1 if d > dim else 0), outer_dim)


_INDEX_ARITH = ("arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.ceildivsi",
                "arith.floordivsi", "arith.remsi", "arith.maxsi", "arith.minsi", "arith.index_cast")


def reify_dim(value: ir.Value, k: int, outer_dim) -> ir.Value | None:
    """Dim `k` of `value`, a value of a body, as an index computed at the current insertion point
    (before the op that owns the body), or None when its size is not a function of the op's
    operands that tidal follows. `outer_dim(arg, k)` is dim k of a body argument from outside.
    Dynamic sizes (Dynamo's) reach a body through its arguments: tensor.dim of an argument,
    tensor.empty of such sizes, and linalg results shaped like their inits."""
    t = value.type
    if not t.is_dynamic_dim(k):
        return index(t.get_dim_size(k))
    owner = value.owner
    if isinstance(owner, ir.Block):
        return outer_dim(value, k)
    name = owner.name
    if name == "tensor.empty":
        return _materialize(owner.operands[sum(1 for j in range(k) if t.is_dynamic_dim(j))], outer_dim)
    if name == "tensor.cast":
        return reify_dim(owner.operands[0], k, outer_dim)
    if name.startswith("linalg."):  # destination style: result i has the shape of init i
        results, operands = list(owner.results), list(owner.operands)
        i = ir.OpResult(value).result_number
        return reify_dim(operands[len(operands) - len(results) + i], k, outer_dim)
    if name in ("tensor.insert_slice", "tensor.parallel_insert_slice"):  # shaped like the destination
        return reify_dim(owner.operands[1], k, outer_dim)
    if name == "tensor.collapse_shape":  # the product of the source dims collapsed into k
        group = list(ir.ArrayAttr(owner.attributes["reassociation"])[k])
        sizes = [reify_dim(owner.operands[0], ir.IntegerAttr(d).value, outer_dim) for d in group]
        if any(v is None for v in sizes):
            return None
        product = sizes[0]
        for v in sizes[1:]:
            product = arith.MulIOp(product, v).result
        return product
    if name == "tensor.expand_shape":  # its dynamic output sizes are operands
        return _materialize(owner.operands[1 + sum(1 for j in range(k) if t.is_dynamic_dim(j))], outer_dim)
    # scf ops of bodies lowered already (inner ops are lowered first): a loop's result is shaped
    # like its initial value (tidal's carries keep their shapes), an if's like its then-value
    i = ir.OpResult(value).result_number
    if name == "scf.for":
        return reify_dim(owner.operands[3 + i], k, outer_dim)
    if name == "scf.while" and i < len(owner.operands) and owner.operands[i].type == t:
        return reify_dim(owner.operands[i], k, outer_dim)
    if name == "scf.if":
        return reify_dim(list(list(owner.regions[0].blocks[0].operations)[-1].operands)[i], k, outer_dim)
    return None


def _materialize(size: ir.Value, outer_dim) -> ir.Value | None:
    """An index value of a body, recomputed at the current insertion point (see `reify_dim`)."""
    owner = size.owner
    if isinstance(owner, ir.Block):
        return None
    name = owner.name
    if name == "arith.constant":
        return arith.ConstantOp(size.type, owner.attributes["value"]).result
    if name == "tensor.dim":
        of = owner.operands[1].owner
        if isinstance(of, ir.Block) or of.name != "arith.constant":
            return None
        return reify_dim(owner.operands[0], ir.IntegerAttr(of.attributes["value"]).value, outer_dim)
    if name in _INDEX_ARITH:
        operands = [_materialize(v, outer_dim) for v in owner.operands]
        if any(v is None for v in operands):
            return None
        copy = owner.clone(ip=ir.InsertionPoint.current)
        for i, v in enumerate(operands):
            copy.operands[i] = v
        return copy.results[0]
    return None


def inline_body(block: ir.Block, args: Sequence[ir.Value], anchor: ir.Operation) -> list[ir.Value]:
    """Move `block`'s ops before `anchor` with its arguments replaced by `args`.

    Returns the values its `tidal.yield` yielded; the yield itself is erased.
    """
    for arg, value in zip(block.arguments, args):
        arg.replace_all_uses_with(value)
    ops = list(block.operations)
    terminator = ops[-1]
    assert terminator.name == YIELD
    for op in ops[:-1]:
        op.move_before(anchor)
    values = list(terminator.operands)
    terminator.erase()
    return values


def clone_body(block: ir.Block, args: Sequence[ir.Value], anchor: ir.Operation) -> list[ir.Value]:
    """Like `inline_body`, but copies `block`'s ops (the block stays): for a body used at
    several places. Values of the block (its arguments, its ops' results) are remapped in the
    copies, nested regions included."""
    mapping = dict(zip(block.arguments, args))

    def remap(op):
        for i, v in enumerate(op.operands):
            if v in mapping:
                op.operands[i] = mapping[v]
        return ir.WalkResult.ADVANCE

    ops = list(block.operations)
    assert ops[-1].name == YIELD
    for op in ops[:-1]:
        copy = op.operation.clone(ip=ir.InsertionPoint(anchor))
        copy.walk(remap)
        for old, new in zip(op.results, copy.results):
            mapping[old] = new
    return [mapping.get(v, v) for v in ops[-1].operands]


def anchor_at_end(block: ir.Block) -> ir.Operation:
    """A temporary op marking where a body goes; erase it after building the terminator."""
    with ir.InsertionPoint(block):
        return ir.Operation.create("tidal.lowering_anchor")


def replace_op(op: ir.Operation, values: Sequence[ir.Value]) -> None:
    for r, v in zip(op.results, values):
        r.replace_all_uses_with(v)
    op.erase()
