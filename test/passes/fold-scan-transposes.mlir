// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fold-scan-transposes)' | filecheck %s
// PyTorch moves a scan's dim to the front and its stacked results back: a recurrence over
// [B, T, D] along T arrives as transpose -> scan over dim 0 -> transpose. The scan then reads the
// untransposed tensors along dim 1, and both transposes go; a scan whose stacked values are not
// all such transposes keeps them.

#map = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-LABEL: func.func @recurrence_over_time
// CHECK-NOT: linalg.transpose
// CHECK: "tidal.scan"(%{{.*}}, %arg0, %arg1)
// CHECK: dim = 1 : i64
// CHECK-SAME: -> (tensor<4x8xf32>, tensor<4x16x8xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: return %{{.*}}#1 : tensor<4x16x8xf32>
func.func @recurrence_over_time(%g: tensor<4x16x8xf32>, %x: tensor<4x16x8xf32>) -> tensor<4x16x8xf32> {
  %zero = arith.constant dense<0.000000e+00> : tensor<4x8xf32>
  %e = tensor.empty() : tensor<16x4x8xf32>
  %gt = linalg.transpose ins(%g : tensor<4x16x8xf32>) outs(%e : tensor<16x4x8xf32>) permutation = [1, 0, 2]
  %xt = linalg.transpose ins(%x : tensor<4x16x8xf32>) outs(%e : tensor<16x4x8xf32>) permutation = [1, 0, 2]
  %r:2 = "tidal.scan"(%zero, %gt, %xt) ({
  ^bb0(%h: tensor<4x8xf32>, %gs: tensor<4x8xf32>, %xs: tensor<4x8xf32>):
    %o = tensor.empty() : tensor<4x8xf32>
    %n = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%gs, %h, %xs : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) outs(%o : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %out: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %m, %c : f32
      linalg.yield %s : f32
    } -> tensor<4x8xf32>
    "tidal.yield"(%n, %n) : (tensor<4x8xf32>, tensor<4x8xf32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 2 : i64, reverse = false} : (tensor<4x8xf32>, tensor<16x4x8xf32>, tensor<16x4x8xf32>) -> (tensor<4x8xf32>, tensor<16x4x8xf32>)
  %e2 = tensor.empty() : tensor<4x16x8xf32>
  %back = linalg.transpose ins(%r#1 : tensor<16x4x8xf32>) outs(%e2 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
  return %back : tensor<4x16x8xf32>
}

// CHECK-LABEL: func.func @result_read_transposed
// CHECK: linalg.transpose
// CHECK: "tidal.associative_scan"
// CHECK: dim = 0 : i64
func.func @result_read_transposed(%x: tensor<4x16x8xf32>) -> tensor<16x4x8xf32> {
  %e = tensor.empty() : tensor<16x4x8xf32>
  %xt = linalg.transpose ins(%x : tensor<4x16x8xf32>) outs(%e : tensor<16x4x8xf32>) permutation = [1, 0, 2]
  %r = "tidal.associative_scan"(%xt) ({
  ^bb0(%l: tensor<4x8xf32>, %rr: tensor<4x8xf32>):
    %o = tensor.empty() : tensor<4x8xf32>
    %n = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%l, %rr : tensor<4x8xf32>, tensor<4x8xf32>) outs(%o : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %out: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    } -> tensor<4x8xf32>
    "tidal.yield"(%n) : (tensor<4x8xf32>) -> ()
  }) {dim = 0 : i64, num_xs = 1 : i64, reverse = false} : (tensor<16x4x8xf32>) -> tensor<16x4x8xf32>
  return %r : tensor<16x4x8xf32>
}
