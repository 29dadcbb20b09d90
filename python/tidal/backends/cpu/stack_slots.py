"""`tidal-hoist-stack-slots`: a `memref.alloca` inside a loop is made once, before the loop.

A stack slot lives until its allocation scope (the function) returns, and nothing lowers a loop
with a stack save/restore: an alloca in a loop body is a fresh slot on every iteration, and the
stack grows by its size each time. `convert-vector-to-scf` puts the scratch buffer of each 2-D
transfer at the start of the loop body that holds it: a 16x16 transpose tile read and written
through two slots of 1 KiB left 2 KiB on the stack per tile, and a linear recurrence over dim 1 of
[16, 131072] f32 (a transpose of 8192 tiles before its scan, one after) overflowed the main
thread's 8 MiB stack at its first call (a segmentation fault; on a worker thread, libgomp's stack).

A slot of static size whose address stays in the iteration (read and written through loads,
stores and views, never yielded, returned nor passed to a call) is reused by every iteration
unchanged: each iteration writes it before reading it. It moves to the start of its allocation
scope. Any other slot in a loop is left where it is, and `tidal-llvm-contract` refuses the
function (a compile-time error instead of a crash that depends on the trip count).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass

# Ops whose regions are an automatic allocation scope (their slots die with each execution).
_SCOPES = ("func.func", "llvm.func", "memref.alloca_scope", "scf.forall", "scf.parallel")
_LOOPS = ("scf.for", "scf.while", "affine.for")
# Ops that give another view of the same memory: their users are the slot's users.
_VIEWS = ("vector.type_cast", "memref.subview", "memref.cast", "memref.reinterpret_cast",
          "memref.collapse_shape", "memref.expand_shape")


def _scope_and_loop(op: ir.Operation):
    """(the op's allocation scope, whether a loop lies between them)."""
    looped, p = False, op.parent
    while p is not None and p.name not in _SCOPES:
        looped = looped or p.name in _LOOPS
        p = p.parent
    return p, looped


def _escapes(value: ir.Value) -> bool:
    for use in value.uses:
        user = use.owner
        if user.name in _VIEWS:
            if _escapes(user.results[0]):
                return True
        elif user.name in ("scf.yield", "scf.condition", "func.return", "func.call", "func.call_indirect", "llvm.call"):
            return True
    return False


@tidal_pass("tidal-hoist-stack-slots", "Move static memref.allocas out of loops to the start of their allocation scope (one slot, not one per iteration)")
def hoist_stack_slots(module_op):
    for op in ops_named(module_op, ("memref.alloca",)):
        op = op.operation
        if len(op.operands):
            continue  # dynamic sizes
        scope, looped = _scope_and_loop(op)
        if scope is None or not looped or _escapes(op.results[0]):
            continue
        op.move_before(scope.regions[0].blocks[0].operations[0])
