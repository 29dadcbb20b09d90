// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-pad-as-generic)' | filecheck %s
// A constant tensor.pad becomes a generic of masked loads: each element reads the source at its
// index minus `low`, clamped into range, and selects the pad value outside; a pad whose source
// may be empty (a dynamic size) or whose value is computed in its region stays.

// CHECK-LABEL: func.func @constant_pad
// CHECK-NOT:   tensor.pad
// CHECK:       linalg.generic
// CHECK:         linalg.index 1
// CHECK:         arith.subi
// CHECK:         arith.minsi
// CHECK:         arith.maxsi
// CHECK:         tensor.extract %arg0
// CHECK:         arith.select
// CHECK:       -> tensor<3x7xf32>
func.func @constant_pad(%arg0: tensor<3x4xf32>) -> tensor<3x7xf32> {
  %cst = arith.constant 5.000000e-01 : f32
  %0 = tensor.pad %arg0 low[0, 1] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %cst : f32
  } : tensor<3x4xf32> to tensor<3x7xf32>
  return %0 : tensor<3x7xf32>
}

// CHECK-LABEL: func.func @dynamic_source
// CHECK:       tensor.pad
func.func @dynamic_source(%arg0: tensor<?x4xf32>) -> tensor<?x7xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.pad %arg0 low[0, 1] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %cst : f32
  } : tensor<?x4xf32> to tensor<?x7xf32>
  return %0 : tensor<?x7xf32>
}
