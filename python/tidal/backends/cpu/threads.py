"""`tidal-forall-to-threads`: each bufferized `scf.forall` runs on the OpenMP thread team.

The JIT has no thread runtime of its own: MLIR's OpenMP lowering emits the `__kmpc_*` API of
LLVM's libomp, which nothing in the process provides, and the async runtime is not in the
torch-mlir wheel. torch's own libgomp is loaded in every process that runs tidal, so a forall is
outlined here into a worker `func.func(!llvm.ptr)` and started with `GOMP_parallel(worker, ctx,
0, 0)`: the team is the one `torch.set_num_threads` sizes, so tidal at N threads is compared with
eager and Inductor at N threads. `ctx` is a stack struct of the values the body uses from above
(memref descriptors, integers, floats); each thread runs a contiguous chunk of the iterations.

Only the outermost forall of a nest is outlined (a forall inside it runs sequentially in its
thread), and only a one-dimensional one over memrefs; any other forall is left to
`scf-forall-to-for`, which runs next and keeps it correct, if sequential.

`tidal-parallelism-to-threads` gives `tidal.parallelism` (the target-neutral "how many iterations
of a forall run at once" a target-free lowering asks) its CPU meaning: the team's size,
`omp_get_max_threads()`. It runs right after `tidal-lower-to-scf`, before bufferization (buffer
deallocation refuses an op of unknown memory effects).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, func, llvm, scf

from tidal.passes.registry import defining_op, is_within, tidal_pass
from tidal.runtime import externs

_RUNTIME = {
    "GOMP_parallel": "(!llvm.ptr, !llvm.ptr, i32, i32) -> ()",
    "omp_get_thread_num": "() -> i32",
    "omp_get_num_threads": "() -> i32",
    "omp_get_max_threads": "() -> i32",
}
externs.require(*_RUNTIME)


def ensure_runtime_decl(module_op, name: str) -> ir.FlatSymbolRefAttr:
    """Declare `name` (a libgomp function) in the module once; returns its symbol."""
    body = module_op.regions[0].blocks[0]
    for op in body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return ir.FlatSymbolRefAttr.get(name)
    parsed = ir.Module.parse(f"func.func private @{name}{_RUNTIME[name]}")
    parsed.body.operations[0].operation.move_before(body.operations[0])
    return ir.FlatSymbolRefAttr.get(name)


@tidal_pass("tidal-parallelism-to-threads", "Lower each tidal.parallelism to the OpenMP team's size (omp_get_max_threads)")
def parallelism_to_threads(module_op) -> None:
    """Each `tidal.parallelism` becomes `omp_get_max_threads()` as an index."""
    found: list[ir.Operation] = []

    def collect(op):
        if op.name == "tidal.parallelism":
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(collect)
    if not found:
        return
    max_threads = ensure_runtime_decl(module_op, "omp_get_max_threads")
    for op in found:
        with ir.InsertionPoint(op), op.location:
            call = func.CallOp([ir.IntegerType.get_signless(32)], max_threads, [])
            threads = arith.IndexCastOp(ir.IndexType.get(), call.result).result
        op.results[0].replace_all_uses_with(threads)
        op.erase()


def _captures(forall: ir.Operation) -> list[ir.Value]:
    seen, out = set(), []

    def visit(op):
        for v in op.operands:
            d = defining_op(v)
            if not is_within(d, forall) and v not in seen:
                seen.add(v)
                out.append(v)
        return ir.WalkResult.ADVANCE

    for inner in forall.regions[0].blocks[0].operations:
        inner.operation.walk(visit)
    return out


def llvm_field_type(t: ir.Type) -> str | None:
    """The LLVM type a value of `t` travels as in a struct in memory (None: cannot travel)."""
    if isinstance(t, ir.MemRefType):
        tail = f", array<{t.rank} x i64>, array<{t.rank} x i64>" if t.rank else ""
        return f"!llvm.struct<(ptr, ptr, i64{tail})>"
    if isinstance(t, ir.IndexType):
        return "i64"
    if isinstance(t, (ir.IntegerType, ir.F32Type, ir.F64Type, ir.F16Type, ir.BF16Type)):
        return str(t)
    return None


def to_field(v: ir.Value, field_type: str) -> ir.Value:
    """`v` as the LLVM value stored in a struct field of `field_type` (at the insertion point)."""
    if isinstance(v.type, ir.IndexType):
        return arith.IndexCastOp(ir.IntegerType.get_signless(64), v).result
    if isinstance(v.type, ir.MemRefType):
        return ir.Operation.create("builtin.unrealized_conversion_cast", results=[ir.Type.parse(field_type)], operands=[v]).result
    return v


def from_field(f: ir.Value, t: ir.Type) -> ir.Value:
    """The value of type `t` that `to_field` stored as `f`."""
    if isinstance(t, ir.IndexType):
        return arith.IndexCastOp(t, f).result
    if isinstance(t, ir.MemRefType):
        return ir.Operation.create("builtin.unrealized_conversion_cast", results=[t], operands=[f]).result
    return f


def _bounds(forall: ir.Operation):
    """(lower, upper, step) as index values, or None if the forall is not one-dimensional."""
    static = [ir.DenseI64ArrayAttr(forall.attributes[n]) for n in ("staticLowerBound", "staticUpperBound", "staticStep")]
    if any(len(s) != 1 for s in static):
        return None
    dynamic = iter(forall.operands)
    out = []
    for s in static:
        out.append(next(dynamic) if s[0] == ir.ShapedType.get_dynamic_size() else arith.ConstantOp(ir.IndexType.get(), s[0]).result)
    return out


def _entry_block(op: ir.Operation) -> ir.Block:
    p = op
    while p.name != "func.func":
        p = p.parent
    return p.regions[0].blocks[0]


def _outline(module_op, forall: ir.Operation, index: int) -> bool:
    if len(forall.results):
        return False
    captures = [v for v in _captures(forall) if defining_op(v).name != "arith.constant"]
    types = [llvm_field_type(v.type) for v in captures]
    if any(t is None for t in types):
        return False
    with forall.location, ir.InsertionPoint(forall):
        bounds = _bounds(forall)
    if bounds is None:
        return False
    i64 = ir.IntegerType.get_signless(64)
    i32 = ir.IntegerType.get_signless(32)
    ptr = ir.Type.parse("!llvm.ptr")
    ctx_type = ir.Type.parse(f"!llvm.struct<({', '.join(['i64'] * 3 + types)})>")
    name = f"__tidal_parallel_{index}"
    top = module_op.regions[0].blocks[0]
    loc = forall.location

    # The caller: pack (lower, upper, step, captures...) into a stack struct and start the team.
    with loc:
        with ir.InsertionPoint.at_block_begin(_entry_block(forall)):
            one = llvm.ConstantOp(i64, ir.IntegerAttr.get(i64, 1)).result
            slot = llvm.AllocaOp(ptr, one, ctx_type).result
        with ir.InsertionPoint(forall):
            packed = llvm.UndefOp(ctx_type).result
            fields = [arith.IndexCastOp(i64, b).result for b in bounds]
            fields += [to_field(v, t) for v, t in zip(captures, types)]
            for i, f in enumerate(fields):
                packed = llvm.InsertValueOp(packed, f, [i]).result
            llvm.StoreOp(packed, slot)
            worker_ref = ir.FlatSymbolRefAttr.get(name)
            fn = func.ConstantOp(ir.FunctionType.get([ptr], []), worker_ref).result
            fn_ptr = ir.Operation.create("builtin.unrealized_conversion_cast", results=[ptr], operands=[fn]).result
            zero = arith.ConstantOp(i32, 0).result
            func.CallOp([], ensure_runtime_decl(module_op, "GOMP_parallel"), [fn_ptr, slot, zero, zero])

    # The worker: unpack, take this thread's contiguous chunk of iterations, run the body.
    with loc, ir.InsertionPoint(top):
        worker = func.FuncOp(name, ir.FunctionType.get([ptr], []), visibility="private")
    entry = worker.add_entry_block()
    thread_num = ensure_runtime_decl(module_op, "omp_get_thread_num")
    num_threads = ensure_runtime_decl(module_op, "omp_get_num_threads")
    idx = ir.IndexType.get()
    with loc, ir.InsertionPoint(entry):
        loaded = llvm.LoadOp(ctx_type, entry.arguments[0]).result
        fields = [llvm.ExtractValueOp(ir.Type.parse(t), loaded, [i]).result for i, t in enumerate(["i64"] * 3 + types)]
        lower, upper, step = (arith.IndexCastOp(idx, f).result for f in fields[:3])
        unpacked = [from_field(f, v.type) for v, f in zip(captures, fields[3:])]
        tid = arith.IndexCastOp(idx, func.CallOp([i32], thread_num, []).result).result
        team = arith.IndexCastOp(idx, func.CallOp([i32], num_threads, []).result).result
        c1 = arith.ConstantOp(idx, 1).result
        count = arith.CeilDivSIOp(arith.SubIOp(upper, lower).result, step).result
        chunk = arith.CeilDivSIOp(count, team).result
        first = arith.MinSIOp(arith.MulIOp(tid, chunk).result, count).result
        last = arith.MinSIOp(arith.AddIOp(first, chunk).result, count).result
        loop = scf.ForOp(first, last, c1, [])
        func.ReturnOp([])
    with loc, ir.InsertionPoint(loop.body):
        iv = arith.AddIOp(lower, arith.MulIOp(loop.induction_variable, step).result).result
        anchor = scf.YieldOp([])

    body = forall.regions[0].blocks[0]
    body.arguments[0].replace_all_uses_with(iv)
    for v, new in zip(captures, unpacked):
        for use in list(v.uses):
            if is_within(use.owner, forall):
                use.owner.operands[use.operand_number] = new
    # Constants are cloned into the worker rather than passed.
    for v in _captures(forall):
        const = defining_op(v)
        if const.name != "arith.constant":
            continue  # a value already unpacked in the worker
        clone = const.clone(ip=ir.InsertionPoint.at_block_begin(entry))
        for use in list(v.uses):
            if is_within(use.owner, forall):
                use.owner.operands[use.operand_number] = clone.result
    for op in list(body.operations)[:-1]:  # the in_parallel terminator is empty once bufferized
        op.operation.move_before(anchor)
    forall.erase()
    return True


@tidal_pass(
    "tidal-forall-to-threads",
    "Run each outermost bufferized 1-D scf.forall on torch's OpenMP team (outlined worker + GOMP_parallel)",
)
def forall_to_threads(module_op):
    outer: list[ir.Operation] = []

    def collect(op):
        if op.name == "scf.forall" and not any(is_within(op.operation, o) for o in outer):
            outer.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(collect, ir.WalkOrder.PRE_ORDER)
    for i, op in enumerate(outer):
        with op.location:
            _outline(module_op, op, i)
