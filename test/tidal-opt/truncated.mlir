// RUN: not tidal-opt %s 2>&1 | filecheck %s
// Input that stops in the middle of a region.
// CHECK: truncated.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected
// CHECK-NOT: Traceback

func.func @f(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
