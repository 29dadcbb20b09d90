// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-hide-contractions, func.func(linalg-fuse-elementwise-ops), tidal-restore-contractions)' | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(func.func(linalg-fuse-elementwise-ops))' | filecheck %s --check-prefix=UNGUARDED
// Elementwise fusion folds the reshapes around a matmul into it: a [T*B, H] x [H, H] matmul of
// collapsed [T, B, H] data becomes a rank-4 generic that BLAS never sees (UNGUARDED). With the
// contractions moved aside while it runs, the matmul stays a matmul between its reshapes, and the
// elementwise op after it still fuses with its other producer.

// CHECK-LABEL: func.func @batched
// CHECK:       tensor.collapse_shape
// CHECK:       linalg.matmul ins(%{{.+}}, %arg1 : tensor<8x3xf32>, tensor<3x3xf32>)
// CHECK:       tensor.expand_shape
// CHECK:       linalg.generic
// CHECK-NOT:   linalg.generic
// UNGUARDED-LABEL: func.func @batched
// UNGUARDED-NOT:   linalg.matmul
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @batched(%x: tensor<4x2x3xf32>, %w: tensor<3x3xf32>) -> tensor<4x2x3xf32> {
  %zero = arith.constant 0.0 : f32
  %flat = tensor.collapse_shape %x [[0, 1], [2]] : tensor<4x2x3xf32> into tensor<8x3xf32>
  %e = tensor.empty() : tensor<8x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x3xf32>) -> tensor<8x3xf32>
  %m = linalg.matmul ins(%flat, %w : tensor<8x3xf32>, tensor<3x3xf32>) outs(%z : tensor<8x3xf32>) -> tensor<8x3xf32>
  %y = tensor.expand_shape %m [[0, 1], [2]] output_shape [4, 2, 3] : tensor<8x3xf32> into tensor<4x2x3xf32>
  %e3 = tensor.empty() : tensor<4x2x3xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%y : tensor<4x2x3xf32>) outs(%e3 : tensor<4x2x3xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<4x2x3xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t, %x : tensor<4x2x3xf32>, tensor<4x2x3xf32>) outs(%e3 : tensor<4x2x3xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x2x3xf32>
  return %s : tensor<4x2x3xf32>
}
