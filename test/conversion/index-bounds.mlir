// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-index-bounds)' | filecheck %s
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-index-bounds, tidal-drop-error-checks)' | filecheck %s --check-prefix=GPU
// A gathering op checks its indices against the indexed dim: when one is out of range, the same
// operator runs as an ATen call on the original operands (it raises eager's error), and the
// lowered op reads index 0 there instead, never memory outside its tensor. index.Tensor wraps
// negative indices (the range is [-n, n)); index_select, gather and embedding do not ([0, n)).
// The GPU backend drops the checks and keeps the safe indices.

// CHECK-LABEL: func.func @index_select
// CHECK: %[[N:.*]] = torch.aten.size.int %arg0, %{{.*}}
// CHECK: %[[BELOW:.*]] = torch.aten.lt.Scalar %arg1, %[[ZERO:.*]] :
// CHECK: %[[ABOVE:.*]] = torch.aten.ge.Scalar %arg1, %[[N]]
// CHECK: %[[BAD:.*]] = torch.aten.logical_or %[[BELOW]], %[[ABOVE]]
// CHECK: %[[ANY:.*]] = torch.aten.any %[[BAD]]
// CHECK: %[[FLAG:.*]] = torch.aten.Bool.Tensor %[[ANY]]
// CHECK: torch.prim.If %[[FLAG]]
// CHECK: "tidal.aten_call"(%arg0, %arg1) {args = [0 : index, 0, 1 : index], callee = "aten::index_select", overload = "", tidal.error_check}
// CHECK: %[[SAFE:.*]] = torch.aten.where.self %[[BAD]], %{{.*}}, %arg1
// CHECK: torch.aten.index_select %arg0, %{{.*}}, %[[SAFE]]
// GPU-LABEL: func.func @index_select
// GPU-NOT: tidal.aten_call
// GPU: torch.aten.where.self
func.func @index_select(%x: !torch.vtensor<[4,3],f32>, %i: !torch.vtensor<[3],si64>) -> !torch.vtensor<[3,3],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.index_select %x, %int0, %i : !torch.vtensor<[4,3],f32>, !torch.int, !torch.vtensor<[3],si64> -> !torch.vtensor<[3,3],f32>
  return %0 : !torch.vtensor<[3,3],f32>
}

// -----

// CHECK-LABEL: func.func @index_tensor_wraps_negatives
// CHECK: %[[N:.*]] = torch.aten.size.int %arg0, %{{.*}}
// CHECK: %[[LOW:.*]] = torch.aten.neg.int %[[N]]
// CHECK: torch.aten.lt.Scalar %arg1, %[[LOW]]
// CHECK: torch.prim.If
// CHECK: "tidal.aten_call"(%arg0, %arg1) {args = [0 : index, [1 : index]], callee = "aten::index", overload = "Tensor", tidal.error_check}
// CHECK: %[[SAFE:.*]] = torch.aten.where.self
// CHECK: %[[LIST:.*]] = torch.prim.ListConstruct %[[SAFE]]
// CHECK: torch.aten.index.Tensor %arg0, %[[LIST]]
func.func @index_tensor_wraps_negatives(%x: !torch.vtensor<[4,3],f32>, %i: !torch.vtensor<[3],si64>) -> !torch.vtensor<[3,3],f32> {
  %0 = torch.prim.ListConstruct %i : (!torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.vtensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[3,3],f32>
  return %1 : !torch.vtensor<[3,3],f32>
}

// -----

// A boolean mask indexes nothing out of range: no check.
// CHECK-LABEL: func.func @mask_index
// CHECK-NOT: torch.prim.If
func.func @mask_index(%x: !torch.vtensor<[4,3],f32>, %m: !torch.vtensor<[4],i1>) -> !torch.vtensor<[?,3],f32> {
  %0 = torch.prim.ListConstruct %m : (!torch.vtensor<[4],i1>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.vtensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[?,3],f32>
  return %1 : !torch.vtensor<[?,3],f32>
}

// -----

// CHECK-LABEL: func.func @gather_and_embedding
// CHECK: "tidal.aten_call"(%arg0, %arg1) {args = [0 : index, 1, 1 : index, false], callee = "aten::gather", overload = "", tidal.error_check}
// CHECK: torch.aten.gather %arg0, %{{.*}}, %{{.*}}, %{{.*}}
// CHECK: "tidal.aten_call"(%arg0, %arg2) {args = [0 : index, 1 : index, -1, false, false], callee = "aten::embedding", overload = "", tidal.error_check}
// CHECK: torch.aten.embedding %arg0, %{{.*}}
func.func @gather_and_embedding(%x: !torch.vtensor<[4,3],f32>, %j: !torch.vtensor<[3,1],si64>, %i: !torch.vtensor<[3],si64>) -> (!torch.vtensor<[3,1],f32>, !torch.vtensor<[3,3],f32>) {
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.aten.gather %x, %int1, %j, %false : !torch.vtensor<[4,3],f32>, !torch.int, !torch.vtensor<[3,1],si64>, !torch.bool -> !torch.vtensor<[3,1],f32>
  %int-1 = torch.constant.int -1
  %1 = torch.aten.embedding %x, %i, %int-1, %false, %false : !torch.vtensor<[4,3],f32>, !torch.vtensor<[3],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[3,3],f32>
  return %0, %1 : !torch.vtensor<[3,1],f32>, !torch.vtensor<[3,3],f32>
}
