"""`tidal.while` → `scf.while`."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, scf, tensor, vector

from tidal.conversion import scf_builders as b
from tidal.conversion.scf_builders import anchor_at_end, inline_body, replace_op
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF

# First capacity of a stacked-output buffer, in rows; it doubles whenever it is full.
INITIAL_ROWS = 16
# A carry of at most this many elements (0-d, or 1-D of static size) travels through the loop in
# registers: a scalar or a vector, not a buffer that bufferization would copy and free on every
# iteration. Inside, it is a tensor again (from_elements / transfer_write), which folds away
# against the scalarized or vectorized ops that read it.
REGISTER_ELEMENTS = 256


class _Registers:
    """Conversions between a small carry's tensor type and its loop-carried register type."""

    def __init__(self, tensor_type: ir.Type):
        self.tensor_type = tensor_type
        t = ir.RankedTensorType(tensor_type) if isinstance(tensor_type, ir.RankedTensorType) else None
        self.kind = None
        if t is None or str(t.element_type) in ("i1", "index") or any(d < 0 for d in t.shape):
            return
        if t.rank == 0:
            self.kind, self.type = "scalar", t.element_type
        elif t.rank == 1 and 0 < t.shape[0] <= REGISTER_ELEMENTS:
            self.kind, self.type = "vector", ir.VectorType.get(t.shape, t.element_type)

    @property
    def loop_type(self) -> ir.Type:
        return self.type if self.kind else self.tensor_type

    def into_registers(self, value: ir.Value) -> ir.Value:
        if self.kind == "scalar":
            return tensor.extract(value, [])
        if self.kind == "vector":
            t = ir.RankedTensorType(self.tensor_type)
            pad = arith.ConstantOp(t.element_type, 0.0 if not isinstance(t.element_type, ir.IntegerType) else 0).result
            identity = ir.AffineMap.get_identity(1)
            return vector.transfer_read(self.type, value, [b.index(0)], identity, pad, [True])
        return value

    def into_tensor(self, value: ir.Value) -> ir.Value:
        if self.kind == "scalar":
            return tensor.from_elements(self.tensor_type, [value])
        if self.kind == "vector":
            t = ir.RankedTensorType(self.tensor_type)
            empty = tensor.EmptyOp(list(t.shape), t.element_type).result
            identity = ir.AffineMap.get_identity(1)
            return vector.TransferWriteOp(self.tensor_type, value, empty, [b.index(0)], identity, [True]).result
        return value


@LOWER_TO_SCF.rule("tidal.while")
def lower_while_to_scf(op):
    """`scf.while`: the cond region computes the predicate (extracted to i1) in `before`, the
    body region runs in `after`; consts are the op's own operands, visible inside scf regions.

    With `stack_outputs`, the loop also carries one growing buffer per carry and the row count:
    each iteration writes its carries into the next row, doubling a full buffer first (amortized
    O(1) per row, no maximum trip count); the results are the buffers' first rows, or the initial
    carries as one row when the loop did not run."""
    operands = list(op.operands)
    n = ir.IntegerAttr(op.attributes["num_carries"]).value
    stacked = "stack_outputs" in op.attributes and ir.BoolAttr(op.attributes["stack_outputs"]).value
    carries, consts = operands[:n], operands[n:]
    carry_types = [v.type for v in carries]
    # stacked loops write every carry into a buffer anyway: they keep tensors
    with ir.InsertionPoint(op), op.location:
        registers = [_Registers(t) if not stacked else _Registers(None) for t in carry_types]
        buffers = []
        if stacked:
            buffers = [_empty_rows(r.type, b.index(INITIAL_ROWS), op, c) for r, c in zip(op.results, carries)]
            buffers.append(b.index(0))
        init = [*[r.into_registers(c) if r.kind else c for r, c in zip(registers, carries)], *buffers]
        types = [v.type for v in init]
        loop = scf.WhileOp(types, init)
        before = loop.before.blocks.append(*types, arg_locs=[op.location] * len(types))
        after = loop.after.blocks.append(*types, arg_locs=[op.location] * len(types))
        anchor = anchor_at_end(before)
        with ir.InsertionPoint(anchor):
            as_tensors = [r.into_tensor(a) if r.kind else a for r, a in zip(registers, list(before.arguments)[:n])]
        (pred,) = inline_body(op.regions[0].blocks[0], as_tensors + consts, anchor)
        with ir.InsertionPoint(anchor):
            scf.ConditionOp(tensor.extract(pred, []), list(before.arguments))
        anchor.erase()
        anchor = anchor_at_end(after)
        with ir.InsertionPoint(anchor):
            as_tensors = [r.into_tensor(a) if r.kind else a for r, a in zip(registers, list(after.arguments)[:n])]
        new_carries = inline_body(op.regions[1].blocks[0], as_tensors + consts, anchor)
        with ir.InsertionPoint(anchor):
            new_carries = [r.into_registers(c) if r.kind else c for r, c in zip(registers, new_carries)]
            rows = []
            if stacked:
                *bufs, count = list(after.arguments)[n:]
                bufs = [_with_room(buf, count, op) for buf in bufs]
                rows = [b.insert_step(c, buf, 0, count) for c, buf in zip(new_carries, bufs)]
                rows.append(arith.AddIOp(count, b.index(1)).result)
            scf.YieldOp([*new_carries, *rows])
        anchor.erase()
        results = list(loop.results)
        results[:n] = [r.into_tensor(v) if r.kind else v for r, v in zip(registers, results[:n])]
        if stacked:
            *bufs, count = results[n:]
            results = _stacked_results(op, carries, carry_types, bufs, count)
    replace_op(op, results[: len(op.results)])


def _empty_rows(stacked_type, rows, op, row_like):
    """`rows` rows shaped like `row_like`: a carry keeps its shape through the loop, so a dynamic
    dim of a row (Dynamo's symbolic sizes) is the initial carry's."""
    return b.empty_like_stacked(stacked_type, rows, 0, f"'{op.name}' stacked result", op.location,
                                lambda k: b.dim_size(row_like, k - 1))


def _with_room(buf, count, op):
    """`buf`, or a buffer twice its size holding its rows when it is full."""
    capacity = tensor.dim(buf, b.index(0))
    full = arith.CmpIOp(arith.CmpIPredicate.eq, count, capacity).result
    grow = scf.IfOp(full, [buf.type], has_else=True)
    with ir.InsertionPoint(grow.then_block):
        bigger = b.empty_like_stacked(buf.type, arith.MulIOp(capacity, b.index(2)).result, 0, "", op.location,
                                      lambda k: b.dim_size(buf, k))
        scf.YieldOp([b.insert_rows(buf, bigger, capacity)])
    with ir.InsertionPoint(grow.else_block):
        scf.YieldOp([buf])
    return grow.result


def _stacked_results(op, carries, carry_types, bufs, count):
    """The filled rows, or the initial carries as one row when the loop did not run."""
    ran = arith.CmpIOp(arith.CmpIPredicate.ne, count, b.index(0)).result
    pick = scf.IfOp(ran, [r.type for r in op.results], has_else=True)
    with ir.InsertionPoint(pick.then_block):
        scf.YieldOp([b.extract_rows(buf, count, r.type) for buf, r in zip(bufs, op.results)])
    with ir.InsertionPoint(pick.else_block):
        one = b.index(1)
        scf.YieldOp([
            b.insert_step(c, _empty_rows(r.type, one, op, c), 0, b.index(0))
            for c, r in zip(carries, op.results)
        ])
    return list(pick.results)
