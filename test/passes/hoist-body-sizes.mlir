// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-hoist-body-sizes)' | filecheck %s
// torch-mlir's broadcast of a dynamic size reads the source's size inside the gather body; the
// size is the same at every point, so it is read once before the generic (its constant with it).
// A dim whose index the body computes stays.

// CHECK-LABEL: func.func @broadcast_gather
// CHECK:       %[[C0:.*]] = arith.constant 0 : index
// CHECK:       %[[D:.*]] = tensor.dim %arg0, %[[C0]]
// CHECK:       linalg.generic
// CHECK-NOT:   tensor.dim
// CHECK:       arith.cmpi eq, %[[D]]
// CHECK:       linalg.yield
func.func @broadcast_gather(%src: tensor<?x3xf32>, %n: index) -> tensor<?x3xf32> {
  %c1 = arith.constant 1 : index
  %init = tensor.empty(%n) : tensor<?x3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%init : tensor<?x3xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %c0 = arith.constant 0 : index
    %d = tensor.dim %src, %c0 : tensor<?x3xf32>
    %one = arith.cmpi eq, %d, %c1 : index
    %k = arith.select %one, %c0, %i : index
    %e = tensor.extract %src[%k, %j] : tensor<?x3xf32>
    linalg.yield %e : f32
  } -> tensor<?x3xf32>
  return %r : tensor<?x3xf32>
}

// CHECK-LABEL: func.func @dim_chosen_in_the_body
// CHECK:       linalg.generic
// CHECK:       linalg.index 1
// CHECK-NEXT:  tensor.dim %arg0
func.func @dim_chosen_in_the_body(%src: tensor<?x?xf32>) -> tensor<2x2xindex> {
  %init = tensor.empty() : tensor<2x2xindex>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%init : tensor<2x2xindex>) {
  ^bb0(%out: index):
    %j = linalg.index 1 : index
    %d = tensor.dim %src, %j : tensor<?x?xf32>
    linalg.yield %d : index
  } -> tensor<2x2xindex>
  return %r : tensor<2x2xindex>
}
