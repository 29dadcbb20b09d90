"""`tidal-split-large-functions`: a huge function body becomes a chain of calls to pieces of it.

LLVM's optimizer and code generator grow faster than linearly with the size of one function: a
512-step RNN that Dynamo unrolled is one function of ~95k LLVM ops, and the JIT spent 24.4 s
optimizing and 10.2 s generating code for it (1.5 s and 1.2 s at 128 steps). Here the top-level
ops of a body of at least `min-ops` ops (nested ops counted) are cut into consecutive pieces of
about `ops-per-function` ops, and each piece moves into a private function of one `!llvm.ptr`:
the values crossing the cut travel through a struct on the caller's stack, in and out. (As
arguments they would be 3 + 2·rank scalars per memref; the last piece of that RNN reads all 512
hidden states, and a call with thousands of arguments made code generation slower than the whole
function had been.) The pieces are `noinline`, or LLVM would inline each back into its only
caller. Constants are cloned into the pieces that use them; stack slots stay in the caller, whose
frame outlives the calls.

Runs on bufferized memrefs before scf→cf, while a body is still one block.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func, llvm

from tidal.backends.cpu.threads import from_field, llvm_field_type, to_field
from tidal.passes.registry import tidal_pass

DEFAULT_OPS_PER_FUNCTION = 2000
# Smaller bodies stay whole: LLVM's cost is still near-linear there and the frames cost more than
# the pieces save (unrolled RNN, 128 steps ≈ 14k ops: 5.3 s whole, 5.8 s split; 256 steps: 13.5 s
# whole, 12.0 s split; 512 steps: 50.1 s whole, 28.1 s split).
DEFAULT_MIN_OPS = 20000

# No operands, no side effects: cheaper to repeat in a piece than to pass in.
_CONSTANT_LIKE = ("arith.constant", "memref.get_global", "func.constant", "llvm.mlir.constant",
                  "llvm.mlir.addressof", "llvm.mlir.zero", "llvm.mlir.undef", "ub.poison")
# Stack allocations die with the function that makes them: they stay in the caller.
_STACK_SLOTS = ("memref.alloca", "llvm.alloca")


def _count_ops(op: ir.Operation) -> int:
    n = 0

    def visit(_):
        nonlocal n
        n += 1
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return n


def _stays_in_caller(op: ir.Operation) -> bool:
    return op.name in _CONSTANT_LIKE or op.name in _STACK_SLOTS


class _Piece:
    """Consecutive top-level ops of one body, with the values flowing into and out of them."""

    def __init__(self, ops: list[ir.Operation]):
        self.ops = ops
        self.inside: set[ir.Operation] = set()
        defined: set[ir.Value] = set()
        self.uses_from_before: list[tuple[ir.Operation, int, ir.Value]] = []

        def collect(op):
            self.inside.add(op.operation)
            defined.update(op.results)
            for region in op.regions:
                for block in region.blocks:
                    defined.update(block.arguments)
            return ir.WalkResult.ADVANCE

        def operands(op):
            for i, v in enumerate(op.operands):
                if v not in defined:
                    self.uses_from_before.append((op.operation, i, v))
            return ir.WalkResult.ADVANCE

        for op in ops:
            op.walk(collect, ir.WalkOrder.PRE_ORDER)
        for op in ops:
            op.walk(operands)
        self.live_out = [r for op in ops for r in op.results if any(u.owner.operation not in self.inside for u in r.uses)]
        self.passed = list({v: None for _, _, v in self.uses_from_before if not _is_constant(v)})

    def outline(self, module_body: ir.Block, name: str, before: ir.Operation, caller_entry: ir.Block) -> None:
        """Move the ops into `name(!llvm.ptr)`. The values crossing the cut travel through one
        struct on the caller's stack: as arguments they would be 3 + 2·rank scalars per memref,
        and LLVM compiles a call with thousands of arguments slowly."""
        passed, live_out = self.passed, self.live_out
        fields = [llvm_field_type(v.type) for v in passed + live_out]
        struct = ir.Type.parse(f"!llvm.struct<({', '.join(fields)})>")
        constants = list({v: None for _, _, v in self.uses_from_before if _is_constant(v)})
        with self.ops[0].location:
            with ir.InsertionPoint(module_body):
                piece = func.FuncOp(name, ir.FunctionType.get([_ptr_type()], []), visibility="private")
            piece.attributes["llvm.no_inline"] = ir.UnitAttr.get()  # func-to-llvm keeps `llvm.` attributes
            entry = piece.add_entry_block()
            frame = entry.arguments[0]
            with ir.InsertionPoint(entry):
                inside = {v: v.owner.operation.clone().results[0] for v in constants}
                for i, v in enumerate(passed):
                    inside[v] = _load(frame, struct, i, fields[i], v.type)
                ret = func.ReturnOp([]).operation
            with ir.InsertionPoint.at_block_begin(caller_entry):
                i64 = ir.IntegerType.get_signless(64)
                slot = llvm.AllocaOp(_ptr_type(), llvm.ConstantOp(i64, ir.IntegerAttr.get(i64, 1)).result, struct).result
            with ir.InsertionPoint(before):
                for i, v in enumerate(passed):
                    _store(v, slot, struct, i, fields[i])
                func.CallOp([], ir.FlatSymbolRefAttr.get(name), [slot])
                outside = [_load(slot, struct, i, fields[i], v.type) for i, v in enumerate(live_out, len(passed))]
            for old, new in zip(live_out, outside):
                for use in list(old.uses):
                    if use.owner.operation not in self.inside:
                        use.owner.operands[use.operand_number] = new
            for op, i, v in self.uses_from_before:
                op.operands[i] = inside[v]
            for op in self.ops:
                op.move_before(ret)
            with ir.InsertionPoint(ret):
                for i, v in enumerate(live_out, len(passed)):
                    _store(v, frame, struct, i, fields[i])


def _ptr_type() -> ir.Type:
    return ir.Type.parse("!llvm.ptr")


def _field(base: ir.Value, struct: ir.Type, i: int) -> ir.Value:
    return llvm.GEPOp(_ptr_type(), base, [], [0, i], struct, ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0)).result


def _store(v: ir.Value, base: ir.Value, struct: ir.Type, i: int, field: str) -> None:
    llvm.StoreOp(to_field(v, field), _field(base, struct, i))


def _load(base: ir.Value, struct: ir.Type, i: int, field: str, t: ir.Type) -> ir.Value:
    return from_field(llvm.LoadOp(ir.Type.parse(field), _field(base, struct, i)).result, t)


def _defined_by(v: ir.Value, names) -> bool:
    return not isinstance(v.owner, ir.Block) and v.owner.operation.name in names


def _is_constant(v: ir.Value) -> bool:
    return _defined_by(v, _CONSTANT_LIKE)


def _split(fn: ir.Operation, module_body: ir.Block, limit: int, min_ops: int) -> int:
    """Outline pieces of `fn`'s body; returns how many functions were made."""
    blocks = fn.regions[0].blocks
    if len(blocks) != 1:
        return 0
    body = blocks[0]
    top = [op.operation for op in body.operations]
    *ops, terminator = top
    sizes = [_count_ops(op) for op in ops]
    if sum(sizes) < max(min_ops, 2 * limit):
        return 0
    # Constants and stack slots first: every piece can then clone or receive them.
    stay = [op for op in ops if _stays_in_caller(op) and all(_is_constant(v) for v in op.operands)]
    for op in reversed(stay):
        op.move_before(body.operations[0].operation)
    kept = set(stay)
    pieces, current, size = [], [], 0
    for op, n in zip(ops, sizes):
        if op in kept:
            continue
        current.append(op)
        size += n
        if size >= limit:
            pieces.append(current)
            current, size = [], 0
    if current:
        pieces.append(current)
    if len(pieces) < 2:
        return 0
    fn_name = ir.StringAttr(fn.attributes["sym_name"]).value
    anchors = [p[0] for p in pieces[1:]] + [terminator]
    made = 0
    for piece_ops, anchor in zip(pieces, anchors):
        piece = _Piece(piece_ops)
        if any(_defined_by(v, _STACK_SLOTS) for v in piece.live_out):
            continue  # a stack slot made inside would not outlive the piece
        if any(llvm_field_type(v.type) is None for v in piece.passed + piece.live_out):
            continue
        piece.outline(module_body, f"{fn_name}__part{made}", anchor, body)
        made += 1
    for op in reversed(stay):  # the pieces cloned what they use
        if op.name in _CONSTANT_LIKE and all(not list(r.uses) for r in op.results):
            op.erase()
    return made


@tidal_pass(
    "tidal-split-large-functions",
    "Move consecutive pieces of a huge function body into noinline functions (LLVM compile time)",
    options=("ops-per-function", "min-ops"),
)
def split_large_functions(module_op, ops_per_function: str | None = None, min_ops: str | None = None):
    limit = _positive("ops-per-function", ops_per_function, DEFAULT_OPS_PER_FUNCTION)
    smallest = _positive("min-ops", min_ops, DEFAULT_MIN_OPS)
    module_body = module_op.regions[0].blocks[0]
    for op in list(module_body.operations):
        if op.operation.name == "func.func" and len(op.regions[0].blocks):
            _split(op.operation, module_body, limit, smallest)


def _positive(option: str, text: str | None, default: int) -> int:
    from tidal.diagnostics import TidalUnsupported

    text = str(default) if text is None else text
    if not text.isdigit() or int(text) < 1:
        raise TidalUnsupported(f"{option} must be a positive integer, got '{text}'")
    return int(text)
