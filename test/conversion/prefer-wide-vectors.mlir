// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-prefer-wide-vectors)' | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-prefer-wide-vectors{width=256})' | filecheck %s --check-prefix=W256
// RUN: not tidal-opt %s --pass-pipeline='builtin.module(tidal-prefer-wide-vectors{width=wide})' 2>&1 | filecheck %s --check-prefix=BAD
// Every function tidal defines asks LLVM for 512-bit vectors (LLVM caps AVX-512 hosts at 256 by
// default); an entry already there is replaced, other passthrough entries kept; declarations
// (BLAS, libm) are left alone.

// CHECK-LABEL: llvm.func @body(
// CHECK-SAME:  passthrough = [{{\[}}"prefer-vector-width", "512"]]
llvm.func @body(%a: f32) -> f32 {
  %0 = llvm.fmul %a, %a : f32
  llvm.return %0 : f32
}

// CHECK-LABEL: llvm.func @tuned(
// CHECK-SAME:  passthrough = ["nounwind", {{\[}}"prefer-vector-width", "512"]]
// W256-LABEL: llvm.func @tuned(
// W256-SAME:  passthrough = ["nounwind", {{\[}}"prefer-vector-width", "256"]]
llvm.func @tuned(%a: f32) -> f32 attributes {passthrough = ["nounwind", ["prefer-vector-width", "128"]]} {
  llvm.return %a : f32
}

// CHECK: llvm.func @sgemm_(!llvm.ptr)
// CHECK-NOT: passthrough
llvm.func @sgemm_(!llvm.ptr)

// BAD: error: width must be 128, 256 or 512 (bits), got 'wide'
