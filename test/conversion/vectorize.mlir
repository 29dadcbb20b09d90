// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-vectorize)' | filecheck %s
// Small elementwise generics of static shape become vector code; matmuls (for BLAS), boolean
// results (a vector of i1 is packed bits in memory), large ops, 2-D ops and bodies that index stay.

#map = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @step
// CHECK-NOT: linalg.generic
// CHECK: %[[A:.*]] = vector.transfer_read %arg0{{.*}} : tensor<16xf32>, vector<16xf32>
// CHECK: %[[B:.*]] = vector.transfer_read %arg1{{.*}} : tensor<16xf32>, vector<16xf32>
// CHECK: %[[M:.*]] = arith.mulf %[[A]], %[[B]] : vector<16xf32>
// CHECK: vector.transfer_write %[[M]]
func.func @step(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %m = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%a, %b : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    linalg.yield %p : f32
  } -> tensor<16xf32>
  return %m : tensor<16xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK: linalg.generic
// CHECK: arith.cmpf
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: linalg.generic
// CHECK: arith.subf
// CHECK: linalg.matmul
// CHECK-NOT: vector.
func.func @kept(%a: tensor<16xf32>, %big: tensor<2048xf32>, %m: tensor<4x4xf32>) -> (tensor<16xi1>, tensor<2048xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %e = tensor.empty() : tensor<16xi1>
  %c = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%a, %a : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xi1>) {
  ^bb0(%x: f32, %y: f32, %o: i1):
    %p = arith.cmpf oeq, %x, %y : f32
    linalg.yield %p : i1
  } -> tensor<16xi1>
  %eb = tensor.empty() : tensor<2048xf32>
  %s = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%big : tensor<2048xf32>) outs(%eb : tensor<2048xf32>) {
  ^bb0(%x: f32, %o: f32):
    %p = arith.addf %x, %x : f32
    linalg.yield %p : f32
  } -> tensor<2048xf32>
  %e2 = tensor.empty() : tensor<4x4xf32>
  %two_d = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<4x4xf32>) outs(%e2 : tensor<4x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %p = arith.subf %x, %x : f32
    linalg.yield %p : f32
  } -> tensor<4x4xf32>
  %z = arith.constant 0.0 : f32
  %em = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%em : tensor<4x4xf32>) -> tensor<4x4xf32>
  %mm = linalg.matmul ins(%m, %m : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %c, %s, %two_d, %mm : tensor<16xi1>, tensor<2048xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
