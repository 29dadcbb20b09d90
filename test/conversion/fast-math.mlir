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
// CHECK:       math.roundeven
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

// exp's clamp is compare-and-select in the form of x86's max/min (a NaN takes the bound: the
// final select puts it back); the bounds make overflow and underflow come out of the arithmetic,
// so the only select after them is NaN's.
// CHECK-LABEL: func.func @exp
// CHECK-DAG:   %[[LO:.+]] = arith.constant -1.040000e+02 : f32
// CHECK-DAG:   %[[HI:.+]] = arith.constant 8.875000e+01 : f32
// CHECK:       %[[GT:.+]] = arith.cmpf ogt, %[[X:.+]], %[[LO]] : f32
// CHECK-NEXT:  %[[ABOVE:.+]] = arith.select %[[GT]], %[[X]], %[[LO]] : f32
// CHECK-NEXT:  %[[LT:.+]] = arith.cmpf olt, %[[ABOVE]], %[[HI]] : f32
// CHECK-NEXT:  %[[XC:.+]] = arith.select %[[LT]], %[[ABOVE]], %[[HI]] : f32
// CHECK:       math.roundeven
// CHECK-NOT:   arith.select
// CHECK:       arith.bitcast
// CHECK:       arith.bitcast
// CHECK-NEXT:  %[[SCALED:.+]] = arith.mulf
// CHECK-NEXT:  %[[NAN:.+]] = arith.cmpf uno, %[[X]], %[[X]] : f32
// CHECK-NEXT:  %[[E:.+]] = arith.select %[[NAN]], %[[X]], %[[SCALED]] : f32
// CHECK-NEXT:  return %[[E]]
func.func @exp(%x: f32) -> f32 {
  %e = math.exp %x : f32
  return %e : f32
}

// tanh is exactly ±1 (copysign) from |x| = 9.0108404 on, where eager's tanhf is; a NaN compares
// false there and keeps the rational function's NaN.
// CHECK-LABEL: func.func @tanh
// CHECK:       arith.divf
// CHECK:       %[[SAT:.+]] = arith.constant 9.010840e+00 : f32
// CHECK-NEXT:  %[[GE:.+]] = arith.cmpf oge, %{{.+}}, %[[SAT]] : f32
// CHECK-NEXT:  %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:  %[[UNIT:.+]] = math.copysign %[[ONE]], %arg0 : f32
// CHECK-NEXT:  %[[R:.+]] = arith.select
// CHECK-NEXT:  %[[T:.+]] = arith.select %[[GE]], %[[UNIT]], %[[R]] : f32
// CHECK-NEXT:  return %[[T]]
func.func @tanh(%x: f32) -> f32 {
  %t = math.tanh %x : f32
  return %t : f32
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
