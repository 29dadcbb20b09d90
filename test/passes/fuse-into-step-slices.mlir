// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fuse-into-step-slices)' | filecheck %s
// exp(g) of associative_scan(combine, (g.exp(), x)) after tidal-lower-to-scf: read only as step
// slices (the peeled first step and one per iteration), so each slice becomes exp of g's slice
// and the full-size exp, written before the loop and read back in it, goes.

// CHECK-LABEL: func.func @main
// CHECK-NOT:   ins(%arg0 : tensor<5x4xf32>)
// CHECK:       %[[G0:.+]] = tensor.extract_slice %arg0[%{{.+}}, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
// CHECK:       linalg.generic {{.*}} ins(%[[G0]] : tensor<4xf32>)
// CHECK:       math.exp
// CHECK:       scf.for
// CHECK:       %[[GT:.+]] = tensor.extract_slice %arg0[%arg2, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
// CHECK:       linalg.generic {{.*}} ins(%[[GT]] : tensor<4xf32>)
// CHECK:       math.exp
// CHECK-NOT:   tensor<5x4xf32>) {
// CHECK:       scf.yield

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0) -> (d0)>
module {
  func.func @main(%arg0: tensor<5x4xf32>, %arg1: tensor<5x4xf32>) -> tensor<5x4xf32> {
    %0 = tensor.empty() : tensor<5x4xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<5x4xf32>) outs(%0 : tensor<5x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %5 = math.exp %in : f32
      linalg.yield %5 : f32
    } -> tensor<5x4xf32>
    %c5 = arith.constant 5 : index
    %2 = tensor.empty() : tensor<5x4xf32>
    %3 = tensor.empty() : tensor<5x4xf32>
    %c5_0 = arith.constant 5 : index
    %c0 = arith.constant 0 : index
    %extracted_slice = tensor.extract_slice %1[%c0, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
    %extracted_slice_1 = tensor.extract_slice %arg1[%c0, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
    %c1 = arith.constant 1 : index
    %c1_2 = arith.constant 1 : index
    %inserted_slice = tensor.insert_slice %extracted_slice_1 into %3[%c0, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<5x4xf32>
    %4 = scf.for %arg2 = %c1 to %c5_0 step %c1_2 iter_args(%arg3 = %inserted_slice) -> (tensor<5x4xf32>) {
      %c1_3 = arith.constant 1 : index
      %5 = arith.subi %arg2, %c1_3 : index
      %extracted_slice_4 = tensor.extract_slice %arg3[%5, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
      %extracted_slice_5 = tensor.extract_slice %1[%arg2, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
      %extracted_slice_6 = tensor.extract_slice %arg1[%arg2, 0] [1, 4] [1, 1] : tensor<5x4xf32> to tensor<4xf32>
      %6 = tensor.empty() : tensor<4xf32>
      %7 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel"]} ins(%extracted_slice_5, %extracted_slice_5 : tensor<4xf32>, tensor<4xf32>) outs(%6 : tensor<4xf32>) {
      ^bb0(%in: f32, %in_8: f32, %out: f32):
        %10 = arith.mulf %in, %in_8 : f32
        linalg.yield %10 : f32
      } -> tensor<4xf32>
      %8 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel"]} ins(%extracted_slice_5, %extracted_slice_4 : tensor<4xf32>, tensor<4xf32>) outs(%6 : tensor<4xf32>) {
      ^bb0(%in: f32, %in_8: f32, %out: f32):
        %10 = arith.mulf %in, %in_8 : f32
        linalg.yield %10 : f32
      } -> tensor<4xf32>
      %9 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel"]} ins(%8, %extracted_slice_6 : tensor<4xf32>, tensor<4xf32>) outs(%6 : tensor<4xf32>) {
      ^bb0(%in: f32, %in_8: f32, %out: f32):
        %10 = arith.addf %in, %in_8 : f32
        linalg.yield %10 : f32
      } -> tensor<4xf32>
      %inserted_slice_7 = tensor.insert_slice %9 into %arg3[%arg2, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<5x4xf32>
      scf.yield %inserted_slice_7 : tensor<5x4xf32>
    }
    return %4 : tensor<5x4xf32>
  }
}
