// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-reciprocal-of-zero)' | filecheck %s
// torch-mlir's aten.reciprocal asserts a nonzero input (abort() on the CPU); eager returns inf.
// The assert goes, the division stays. Other runtime checks (an index bound) stay.

// CHECK-LABEL: func.func @reciprocal
// CHECK-NOT: cf.assert
// CHECK: arith.divf
// CHECK: cf.assert %{{.*}}, "index must be smaller than dim size"
func.func @reciprocal(%x: tensor<64xf32>, %i: i64, %n: i64) -> tensor<64xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %nonzero = arith.cmpf one, %in, %zero : f32
    cf.assert %nonzero, "unimplemented: tensor with zero element"
    %d = arith.divf %one, %in : f32
    linalg.yield %d : f32
  } -> tensor<64xf32>
  %inside = arith.cmpi slt, %i, %n : i64
  cf.assert %inside, "index must be smaller than dim size"
  return %r : tensor<64xf32>
}
