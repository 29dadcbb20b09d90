"""`tidal-soft-bf16`: the bfloat16 rounding routine LLVM may call, defined in the module itself.

Rounding f32 to bf16 is lowered to integer ops (`arith-expand{include-bf16}`), but LLVM's
optimizer recognizes that sequence as `fptrunc float to bfloat`, and on an x86 CPU without
AVX512-BF16 its code generator emits a call to compiler-rt's `__truncsfbf2` for it. Neither
libtorch nor libgcc (before GCC 13) exports that routine, so the JIT failed to link such a
program ("Symbols not found: [ __truncsfbf2 ]": a bfloat16 matmul in a while_loop fell back to
eager, or raised in strict mode) on exactly the machines without native bf16 conversion. The
module defines it, with the same round-to-nearest-even and quiet NaN as the expanded ops.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import tidal_pass

ROUTINE = "__truncsfbf2"

_DEFINITION = f"""
llvm.func @{ROUTINE}(%x: f32) -> bf16 {{
  %c16 = llvm.mlir.constant(16 : i32) : i32
  %c1 = llvm.mlir.constant(1 : i32) : i32
  %bias = llvm.mlir.constant(32767 : i32) : i32
  %qnan = llvm.mlir.constant(32704 : i16) : i16
  %isnan = llvm.fcmp "une" %x, %x : f32
  %bits = llvm.bitcast %x : f32 to i32
  %high = llvm.lshr %bits, %c16 : i32
  %lsb = llvm.and %high, %c1 : i32
  %round = llvm.add %lsb, %bias : i32
  %sum = llvm.add %bits, %round : i32
  %top = llvm.lshr %sum, %c16 : i32
  %narrow = llvm.trunc %top : i32 to i16
  %chosen = llvm.select %isnan, %qnan, %narrow : i1, i16
  %result = llvm.bitcast %chosen : i16 to bf16
  llvm.return %result : bf16
}}
"""


@tidal_pass("tidal-soft-bf16", "Define __truncsfbf2 in an LLVM-dialect module that uses bf16 (no CPU runtime library provides it)")
def soft_bf16(module_op):
    body = module_op.regions[0].blocks[0]
    names = {ir.StringAttr(op.attributes["sym_name"]).value for op in body.operations if "sym_name" in op.attributes}
    if ROUTINE in names or "bf16" not in str(module_op):
        return
    parsed = ir.Module.parse(_DEFINITION)  # alive until its op has moved: it owns the op
    (definition,) = parsed.body.operations
    definition.move_before(body.operations[0])
