// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fast-math, tidal-reassociate-reductions)' | filecheck %s
// f32 tanh, exp and erf become arithmetic LLVM can vectorize (no libm call per element), their
// polynomials multiply-adds LLVM may fuse (`contract`); f64 keeps
// its math op. A reduction's adds may be reassociated (vector partial sums); elementwise ops not.

#id = affine_map<(d0) -> (d0)>
#to_scalar = affine_map<(d0) -> ()>

// CHECK-LABEL: func.func @expansions
// CHECK-NOT:   math.exp
// CHECK-NOT:   math.erf
// CHECK-NOT:   math.tanh
// CHECK:       math.floor
// CHECK:       arith.mulf %{{.+}}, %{{.+}} fastmath<contract> : f32
// CHECK:       arith.addf %{{.+}}, %{{.+}} fastmath<contract> : f32
// CHECK:       arith.fptosi
// CHECK:       arith.bitcast
// CHECK:       arith.cmpf uno
func.func @expansions(%x: f32) -> (f32, f32, f32) {
  %e = math.exp %x : f32
  %r = math.erf %x : f32
  %t = math.tanh %x : f32
  return %e, %r, %t : f32, f32, f32
}

// CHECK-LABEL: func.func @double_stays
// CHECK:       math.exp %{{.+}} : f64
func.func @double_stays(%x: f64) -> f64 {
  %e = math.exp %x : f64
  return %e : f64
}

// CHECK-LABEL: func.func @sum
// CHECK:       arith.addf %{{.+}}, %{{.+}} fastmath<reassoc> : f32
func.func @sum(%x: tensor<64xf32>, %init: tensor<f32>) -> tensor<f32> {
  %s = linalg.generic {indexing_maps = [#id, #to_scalar], iterator_types = ["reduction"]} ins(%x : tensor<64xf32>) outs(%init : tensor<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %n = arith.addf %a, %acc : f32
    linalg.yield %n : f32
  } -> tensor<f32>
  return %s : tensor<f32>
}

// CHECK-LABEL: func.func @elementwise_keeps_order
// CHECK:       arith.addf %{{.+}}, %{{.+}} : f32
// CHECK-NOT:   fastmath
func.func @elementwise_keeps_order(%x: tensor<64xf32>, %y: tensor<64xf32>) -> tensor<64xf32> {
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%y : tensor<64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %n = arith.addf %a, %b : f32
    linalg.yield %n : f32
  } -> tensor<64xf32>
  return %s : tensor<64xf32>
}
