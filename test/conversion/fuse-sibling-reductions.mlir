// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fuse-sibling-reductions)' | filecheck %s
// GPU: split reductions over one operand (same iteration space) become ONE generic with an out per
// reduction, so one kernel reads the operand once; reductions over other operands, of other
// iteration spaces or reading each other's results stay apart.

#id = affine_map<(d0, d1) -> (d0, d1)>
#all = affine_map<(d0, d1) -> ()>
#row = affine_map<(d0, d1) -> (d0)>

// CHECK-LABEL: func.func @any_nan_any_inf
// CHECK-SAME:  (%[[X:[a-z0-9]+]]: tensor<8x4xf32>)
// CHECK:       %[[R:.+]]:2 = linalg.generic {{.+}} iterator_types = ["reduction", "reduction"]} ins(%[[X]] : tensor<8x4xf32>) outs(%{{.+}}, %{{.+}} : tensor<i1>, tensor<i1>)
// CHECK:         arith.cmpf une
// CHECK:         arith.ori
// CHECK:         math.absf
// CHECK:         arith.ori
// CHECK:         linalg.yield %{{.+}}, %{{.+}} : i1, i1
// CHECK-NOT:   linalg.generic
// CHECK:       return %[[R]]#0, %[[R]]#1
func.func @any_nan_any_inf(%x: tensor<8x4xf32>) -> (tensor<i1>, tensor<i1>) {
  %false = arith.constant false
  %e = tensor.empty() : tensor<i1>
  %init = linalg.fill ins(%false : i1) outs(%e : tensor<i1>) -> tensor<i1>
  %a = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%init : tensor<i1>) {
  ^bb0(%v: f32, %o: i1):
    %n = arith.cmpf une, %v, %v : f32
    %r = arith.ori %n, %o : i1
    linalg.yield %r : i1
  } -> tensor<i1>
  %b = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%init : tensor<i1>) {
  ^bb0(%v: f32, %o: i1):
    %m = math.absf %v : f32
    %inf = arith.constant 0x7F800000 : f32
    %n = arith.cmpf oeq, %m, %inf : f32
    %r = arith.ori %n, %o : i1
    linalg.yield %r : i1
  } -> tensor<i1>
  return %a, %b : tensor<i1>, tensor<i1>
}

// Row sums of x and row maxima of x * y: the inputs are the union (x read once).
// CHECK-LABEL: func.func @row_sum_and_max
// CHECK-SAME:  (%[[X:[a-z0-9]+]]: tensor<8x4xf32>, %[[Y:[a-z0-9]+]]: tensor<8x4xf32>)
// CHECK:       %[[R:.+]]:2 = linalg.generic {{.+}} iterator_types = ["parallel", "reduction"]} ins(%[[X]], %[[Y]] : tensor<8x4xf32>, tensor<8x4xf32>)
// CHECK:         arith.addf
// CHECK:         arith.mulf
// CHECK:         arith.maximumf
// CHECK-NOT:   linalg.generic
// CHECK:       return %[[R]]#0, %[[R]]#1
func.func @row_sum_and_max(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %n = linalg.fill ins(%ninf : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%z : tensor<8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [#id, #id, #row], iterator_types = ["parallel", "reduction"]} ins(%x, %y : tensor<8x4xf32>, tensor<8x4xf32>) outs(%n : tensor<8xf32>) {
  ^bb0(%v: f32, %w: f32, %o: f32):
    %p = arith.mulf %v, %w : f32
    %r = arith.maximumf %p, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %s, %m : tensor<8xf32>, tensor<8xf32>
}

// Different operands, different iteration spaces, and a reduction whose init is the other's
// result: three generics stay.
// CHECK-LABEL: func.func @kept_apart
// CHECK-COUNT-4: linalg.generic
// CHECK-NOT:   linalg.generic
func.func @kept_apart(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>) -> (tensor<f32>, tensor<f32>, tensor<8xf32>, tensor<f32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %e8 = tensor.empty() : tensor<8xf32>
  %z8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %sx = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%z : tensor<f32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %sy = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%y : tensor<8x4xf32>) outs(%z : tensor<f32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %rows = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%z8 : tensor<8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %again = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%sx : tensor<f32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  return %sx, %sy, %rows, %again : tensor<f32>, tensor<f32>, tensor<8xf32>, tensor<f32>
}

// The second reduction's init is made after the first reduction, and nothing between them uses
// the first's result: the merged op takes the second one's place.
// CHECK-LABEL: func.func @init_made_between
// CHECK:       linalg.fill
// CHECK-NOT:   linalg.generic
// CHECK:       %[[MAXINIT:.+]] = linalg.fill
// CHECK:       %[[R:.+]]:2 = linalg.generic {{.+}} outs(%{{.+}}, %[[MAXINIT]] : tensor<8xf32>, tensor<8xf32>)
// CHECK-NOT:   linalg.generic
func.func @init_made_between(%x: tensor<8x4xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%z : tensor<8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.addf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %n = linalg.fill ins(%ninf : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x4xf32>) outs(%n : tensor<8xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.maximumf %v, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %s, %m : tensor<8xf32>, tensor<8xf32>
}
