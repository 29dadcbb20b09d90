// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-soft-bf16)' | filecheck %s
// A module that uses bf16 defines the f32 -> bf16 rounding routine LLVM calls on CPUs without
// AVX512-BF16 (round to nearest even: + 0x7fff + the kept part's lowest bit; NaN -> 0x7fc0).

// CHECK-LABEL: llvm.func @__truncsfbf2(%{{.*}}: f32) -> bf16
// CHECK: llvm.mlir.constant(32767 : i32)
// CHECK: llvm.mlir.constant(32704 : i16)
// CHECK: llvm.fcmp "une"
// CHECK: llvm.select
// CHECK: llvm.bitcast %{{.*}} : i16 to bf16
// CHECK-LABEL: llvm.func @uses_bf16
llvm.func @uses_bf16(%p: !llvm.ptr) -> bf16 {
  %0 = llvm.load %p : !llvm.ptr -> bf16
  llvm.return %0 : bf16
}

// -----

// Without bf16, nothing is added.
// CHECK-NOT: __truncsfbf2
// CHECK-LABEL: llvm.func @only_f32
llvm.func @only_f32(%x: f32) -> f32 {
  llvm.return %x : f32
}
