// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-concat-in-place)' | filecheck %s
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-concat-in-place, eliminate-empty-tensors, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, cse, canonicalize)' | filecheck %s --check-prefix=BUF

// Slices that tile their tensor in order concatenate to the tensor itself.
// CHECK-LABEL: func.func @tiling_slices
// CHECK-NOT: tensor.concat
// CHECK: return %arg0
// BUF-LABEL: func.func @tiling_slices
// BUF-NOT: memref.alloc
// BUF-NOT: memref.copy
func.func @tiling_slices(%g: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %first = tensor.extract_slice %g[0, 0] [1, 4] [1, 1] : tensor<8x4xf32> to tensor<1x4xf32>
  %rest = tensor.extract_slice %g[1, 0] [7, 4] [1, 1] : tensor<8x4xf32> to tensor<7x4xf32>
  %c = tensor.concat dim(0) %first, %rest : (tensor<1x4xf32>, tensor<7x4xf32>) -> tensor<8x4xf32>
  return %c : tensor<8x4xf32>
}

// -----

// Out of order, or not covering the tensor: a real concat (here as inserts).
// CHECK-LABEL: func.func @not_tiling
// BUF-LABEL: func.func @not_tiling
// CHECK: tensor.empty() : tensor<8x4xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[0, 0] [7, 4] [1, 1]
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[7, 0] [1, 4] [1, 1]
func.func @not_tiling(%g: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %first = tensor.extract_slice %g[0, 0] [1, 4] [1, 1] : tensor<8x4xf32> to tensor<1x4xf32>
  %rest = tensor.extract_slice %g[1, 0] [7, 4] [1, 1] : tensor<8x4xf32> to tensor<7x4xf32>
  %c = tensor.concat dim(0) %rest, %first : (tensor<7x4xf32>, tensor<1x4xf32>) -> tensor<8x4xf32>
  return %c : tensor<8x4xf32>
}

// -----

// An adjoint's cat([zeros, g[1:] * h[:-1]]): the product is computed straight into rows 1.. of
// the result (one buffer, no copy of the product).
#map = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @product_after_zeros
// CHECK: %[[E:.*]] = tensor.empty() : tensor<8x4xf32>
// CHECK: %[[Z:.*]] = tensor.insert_slice %{{.*}} into %[[E]][0, 0] [1, 4] [1, 1]
// CHECK: tensor.insert_slice %{{.*}} into %[[Z]][1, 0] [7, 4] [1, 1]
// BUF-LABEL: func.func @product_after_zeros
// BUF: %[[OUT:.*]] = memref.alloc() {{.*}} : memref<8x4xf32>
// BUF-NOT: memref.alloc
// BUF: %[[ROWS:.*]] = memref.subview %[[OUT]][1, 0] [7, 4] [1, 1]
// BUF: linalg.generic {{.*}} outs(%[[ROWS]] :
// BUF-NOT: memref.copy
// BUF: return %[[OUT]]
func.func @product_after_zeros(%g: tensor<8x4xf32>, %h: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %zeros = arith.constant dense<0.0> : tensor<1x4xf32>
  %g1 = tensor.extract_slice %g[1, 0] [7, 4] [1, 1] : tensor<8x4xf32> to tensor<7x4xf32>
  %h0 = tensor.extract_slice %h[0, 0] [7, 4] [1, 1] : tensor<8x4xf32> to tensor<7x4xf32>
  %e = tensor.empty() : tensor<7x4xf32>
  %p = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%g1, %h0 : tensor<7x4xf32>, tensor<7x4xf32>) outs(%e : tensor<7x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<7x4xf32>
  %c = tensor.concat dim(0) %zeros, %p : (tensor<1x4xf32>, tensor<7x4xf32>) -> tensor<8x4xf32>
  return %c : tensor<8x4xf32>
}

// -----

// Dynamic sizes stay a concat.
// CHECK-LABEL: func.func @dynamic
// CHECK: tensor.concat
func.func @dynamic(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %c = tensor.concat dim(0) %a, %b : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %c : tensor<?x4xf32>
}
