// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-integer-division)' | filecheck %s
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-integer-division, tidal-drop-error-checks)' | filecheck %s --check-prefix=GPU
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-guard-integer-division)' | filecheck %s --check-prefix=GUARD
// Integer remainder becomes one truncating division (the only one) and Python's sign fix-up; a
// divisor that may be zero gets a check calling the eager operator, which raises eager's error.
// A nonzero constant divisor needs no check. The GPU backend drops the checks (eager CUDA has none).

// CHECK-LABEL: func.func @remainder_by_a_tensor
// CHECK: %[[ZERO:.*]] = torch.aten.eq.Scalar %arg1
// CHECK: %[[ANY:.*]] = torch.aten.any %[[ZERO]]
// CHECK: %[[FLAG:.*]] = torch.aten.Bool.Tensor %[[ANY]]
// CHECK: torch.prim.If %[[FLAG]]
// CHECK: "tidal.aten_call"({{.*}}) {args = [0 : index, 1 : index], callee = "aten::remainder", overload = "Tensor", tidal.error_check}
// CHECK: torch.aten.div.Tensor_mode %arg0, %arg1
// CHECK: torch.aten.bitwise_xor.Tensor
// CHECK: torch.aten.where.self
// CHECK-NOT: torch.aten.remainder
// GPU-LABEL: func.func @remainder_by_a_tensor
// GPU-NOT: tidal.aten_call
func.func @remainder_by_a_tensor(%a: !torch.vtensor<[4],si64>, %b: !torch.vtensor<[4],si64>) -> !torch.vtensor<[4],si64> {
  %0 = torch.aten.remainder.Tensor %a, %b : !torch.vtensor<[4],si64>, !torch.vtensor<[4],si64> -> !torch.vtensor<[4],si64>
  return %0 : !torch.vtensor<[4],si64>
}

// -----

// CHECK-LABEL: func.func @floor_by_a_constant
// CHECK-NOT: torch.prim.If
// CHECK: torch.aten.div.Tensor_mode
// CHECK-NOT: torch.prim.If
// CHECK: return
func.func @floor_by_a_constant(%a: !torch.vtensor<[4],si32>) -> !torch.vtensor<[4],si32> {
  %str = torch.constant.str "floor"
  %0 = torch.vtensor.literal(dense<7> : tensor<si64>) : !torch.vtensor<[],si64>
  %1 = torch.aten.div.Tensor_mode %a, %0, %str : !torch.vtensor<[4],si32>, !torch.vtensor<[],si64>, !torch.str -> !torch.vtensor<[4],si32>
  return %1 : !torch.vtensor<[4],si32>
}

// -----

// Divisors of 0 and -1 become 1, a quotient by -1 the wrapping negation; index arithmetic stays.
// GUARD-LABEL: func.func @guarded
// GUARD: %[[Z:.*]] = arith.cmpi eq, %arg1, %c0_i64
// GUARD: %[[M:.*]] = arith.cmpi eq, %arg1, %c-1_i64
// GUARD: %[[BAD:.*]] = arith.ori %[[Z]], %[[M]]
// GUARD: %[[SAFE:.*]] = arith.select %[[BAD]], %c1_i64, %arg1
// GUARD: %[[Q:.*]] = arith.divsi %arg0, %[[SAFE]]
// GUARD: %[[NEG:.*]] = arith.subi %c0_i64{{.*}}, %arg0
// GUARD: %[[R:.*]] = arith.select %[[M]], %[[NEG]], %[[Q]]
// GUARD: arith.remsi %arg0, %{{.*}} : i64
// GUARD: arith.divsi %arg2, %arg3 : index
// GUARD: return %[[R]]
func.func @guarded(%a: i64, %b: i64, %i: index, %j: index) -> (i64, i64, index) {
  %0 = arith.divsi %a, %b : i64
  %1 = arith.remsi %a, %b : i64
  %2 = arith.divsi %i, %j : index
  return %0, %1, %2 : i64, i64, index
}
