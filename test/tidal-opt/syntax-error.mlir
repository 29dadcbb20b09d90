// RUN: not tidal-opt %s 2>&1 | filecheck %s
// A parse error is one located diagnostic, never a traceback.
// CHECK: syntax-error.mlir:7:22: error: expected SSA operand
// CHECK-NOT: Traceback

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = arith.addf %x, ) : tensor<4xf32>
  return %y : tensor<4xf32>
}
