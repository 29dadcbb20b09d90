// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-scalarize-0d, canonicalize)' | filecheck %s
// A generic over 0-d tensors becomes its body's scalar ops; around scalars that already travel in
// registers the extract/from_elements pairs fold away. Generics of rank > 0 keep their form.

// CHECK-LABEL: func.func @counter
// CHECK-NOT:   linalg.generic
// CHECK:       %[[NEXT:.+]] = arith.addi %arg0, %c1_i64 : i64
// CHECK:       %[[LT:.+]] = arith.cmpi slt, %[[NEXT]], %arg1 : i64
// CHECK:       return %[[NEXT]], %[[LT]] : i64, i1
func.func @counter(%i: i64, %n: i64) -> (i64, i1) {
  %one = arith.constant 1 : i64
  %ti = tensor.from_elements %i : tensor<i64>
  %tn = tensor.from_elements %n : tensor<i64>
  %e = tensor.empty() : tensor<i64>
  %next = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []} ins(%ti : tensor<i64>) outs(%e : tensor<i64>) {
  ^bb0(%a: i64, %o: i64):
    %r = arith.addi %a, %one : i64
    linalg.yield %r : i64
  } -> tensor<i64>
  %eb = tensor.empty() : tensor<i1>
  %lt = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []} ins(%next, %tn : tensor<i64>, tensor<i64>) outs(%eb : tensor<i1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %r = arith.cmpi slt, %a, %b : i64
    linalg.yield %r : i1
  } -> tensor<i1>
  %x = tensor.extract %next[] : tensor<i64>
  %y = tensor.extract %lt[] : tensor<i1>
  return %x, %y : i64, i1
}

// CHECK-LABEL: func.func @vector_kept
// CHECK:       linalg.generic
func.func @vector_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
