// RUN: tidal-opt %s | tidal-opt | filecheck %s
// tidal.aten_call round-trips: callee, overload and the encoded schema arguments survive.

// CHECK-LABEL: func.func @conv
// CHECK: "tidal.aten_call"(%arg0, %arg1) {args = [0 : index, 1 : index, unit, array<i64: 2, 2>, array<i64: 1, 1>, array<i64: 1, 1>, false, array<i64: 0, 0>, 2], callee = "aten::convolution", overload = ""} : (tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x4x4xf32>
func.func @conv(%x: tensor<1x4x8x8xf32>, %w: tensor<6x2x3x3xf32>) -> tensor<1x6x4x4xf32> {
  %r = "tidal.aten_call"(%x, %w) {callee = "aten::convolution", overload = "", args = [0 : index, 1 : index, unit, array<i64: 2, 2>, array<i64: 1, 1>, array<i64: 1, 1>, false, array<i64: 0, 0>, 2]} : (tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x4x4xf32>
  return %r : tensor<1x6x4x4xf32>
}

// CHECK-LABEL: func.func @index_put
// CHECK: "tidal.aten_call"(%arg0, %arg1, %arg2) {{.*}}args = [0 : index, [1 : index], 2 : index, true], callee = "aten::index_put", overload = "hacked_twin"
func.func @index_put(%buf: tensor<5x3xf32>, %idx: tensor<2xi64>, %v: tensor<2x3xf32>) -> tensor<5x3xf32> {
  %r = "tidal.aten_call"(%buf, %idx, %v) {callee = "aten::index_put", overload = "hacked_twin", args = [0 : index, [1 : index], 2 : index, true]} : (tensor<5x3xf32>, tensor<2xi64>, tensor<2x3xf32>) -> tensor<5x3xf32>
  return %r : tensor<5x3xf32>
}
