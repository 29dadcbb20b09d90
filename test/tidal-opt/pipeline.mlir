// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-verify, func.func(cse), canonicalize)' | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(canonicalize)' --mlir-print-ir-after-all -o %t 2>&1 | filecheck %s --check-prefix=DUMP
// RUN: filecheck %s --input-file=%t
// MLIR passes reach into tidal regions (canonicalize folds x*1 inside the body) and the tidal
// verifier keeps passing after each one.

// CHECK-LABEL: func.func @f
// CHECK: "tidal.map"
// CHECK-NOT: arith.mulf
// CHECK: "tidal.yield"
// DUMP: // -----// IR Dump After canonicalize //----- //
// DUMP: "tidal.map"
func.func @f(%xs: tensor<5x2xf32>) -> tensor<5x2xf32> {
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    %one = arith.constant dense<1.0> : tensor<2xf32>
    %y = arith.mulf %x, %one : tensor<2xf32>
    "tidal.yield"(%y) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}
