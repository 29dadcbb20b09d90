// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-torch-to-linalg)' | filecheck %s
// torch-mlir lowers the aten ops inside the tidal body; tidal-retype moves the op itself, its
// block arguments and its yield to builtin tensors; the casts fold away.

// CHECK-LABEL: func.func @scan(%arg0: tensor<3xf32>, %arg1: tensor<6x3xf32>) -> (tensor<3xf32>, tensor<6x3xf32>)
// CHECK: %[[R:.*]]:2 = "tidal.scan"(%arg0, %arg1) ({
// CHECK: ^bb0(%[[C:.*]]: tensor<3xf32>, %[[X:.*]]: tensor<3xf32>):
// CHECK:   %[[S:.*]] = linalg.generic
// CHECK:     arith.addf
// CHECK:   "tidal.yield"(%[[S]], %[[S]]) : (tensor<3xf32>, tensor<3xf32>) -> ()
// CHECK: }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (tensor<3xf32>, tensor<6x3xf32>) -> (tensor<3xf32>, tensor<6x3xf32>)
// CHECK-NOT: torch
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @scan(%arg0: !torch.vtensor<[3],f32>, %arg1: !torch.vtensor<[6,3],f32>) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>) {
  %0:2 = "tidal.scan"(%arg0, %arg1) ({
  ^bb0(%arg2: !torch.vtensor<[3],f32>, %arg3: !torch.vtensor<[3],f32>):
    %int1 = torch.constant.int 1
    %1 = torch.aten.add.Tensor %arg2, %arg3, %int1 : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
    "tidal.yield"(%1, %1) : (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>)
  return %0#0, %0#1 : !torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>
}
