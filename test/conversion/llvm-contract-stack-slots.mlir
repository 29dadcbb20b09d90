// RUN: tidal-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(tidal-llvm-contract)'
// A stack slot outside its function's entry block is allocated again each time its block runs:
// in a loop, the stack grows with the trip count until the thread's stack overflows (a crash that
// depends on the input's size). The LLVM contract refuses it at compile time, unless the function
// saves and restores its stack (memref.alloca_scope's lowering).

llvm.func @slot_in_loop(%n: i64) {
  %c0 = llvm.mlir.constant(0 : i64) : i64
  %c1 = llvm.mlir.constant(1 : i64) : i64
  llvm.br ^head(%c0 : i64)
^head(%i: i64):
  %more = llvm.icmp "slt" %i, %n : i64
  llvm.cond_br %more, ^body, ^done
^body:
  // expected-error@+1 {{a stack slot outside the entry block would be allocated again on every iteration}}
  %s = llvm.alloca %c1 x !llvm.array<16 x vector<16xf32>> : (i64) -> !llvm.ptr
  %next = llvm.add %i, %c1 : i64
  llvm.br ^head(%next : i64)
^done:
  llvm.return
}

// -----

llvm.func @slot_in_entry(%n: i64) {
  %c0 = llvm.mlir.constant(0 : i64) : i64
  %c1 = llvm.mlir.constant(1 : i64) : i64
  %s = llvm.alloca %c1 x !llvm.array<16 x vector<16xf32>> : (i64) -> !llvm.ptr
  llvm.br ^head(%c0 : i64)
^head(%i: i64):
  %more = llvm.icmp "slt" %i, %n : i64
  llvm.cond_br %more, ^body, ^done
^body:
  %next = llvm.add %i, %c1 : i64
  llvm.br ^head(%next : i64)
^done:
  llvm.return
}

// -----

llvm.func @scoped_slot_in_loop(%n: i64) {
  %c0 = llvm.mlir.constant(0 : i64) : i64
  %c1 = llvm.mlir.constant(1 : i64) : i64
  llvm.br ^head(%c0 : i64)
^head(%i: i64):
  %more = llvm.icmp "slt" %i, %n : i64
  llvm.cond_br %more, ^body, ^done
^body:
  %sp = llvm.intr.stacksave : !llvm.ptr
  %s = llvm.alloca %c1 x f32 : (i64) -> !llvm.ptr
  llvm.intr.stackrestore %sp : !llvm.ptr
  %next = llvm.add %i, %c1 : i64
  llvm.br ^head(%next : i64)
^done:
  llvm.return
}
