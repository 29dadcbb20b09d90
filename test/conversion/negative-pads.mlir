// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-negative-pads)' | filecheck %s
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-negative-pads, func.func(convert-torch-to-linalg, canonicalize))' | filecheck %s --check-prefix=LINALG
// A constant_pad_nd that removes elements (a negative amount) becomes a slice of what stays, then a
// pad of the non-negative amounts. torch-mlir hands the amounts to tensor.pad as they are; tensor.pad
// takes only non-negative ones, and its folder returns the source when the types match: [1, -1]
// on a static dim was the input itself.

// CHECK-LABEL: func.func @shift_right
// CHECK: %[[KEPT:.*]] = torch.aten.slice.Tensor %arg0, %int1{{.*}}, %int0{{.*}}, %int2{{.*}}, %{{.*}} : {{.*}} -> !torch.vtensor<[3,2],f32>
// CHECK: %[[AMOUNTS:.*]] = torch.prim.ListConstruct %{{.*}}, %{{.*}} :
// CHECK: %[[PADDED:.*]] = torch.aten.constant_pad_nd %[[KEPT]], %[[AMOUNTS]], %{{.*}} : !torch.vtensor<[3,2],f32>, {{.*}} -> !torch.vtensor<[3,3],f32>
// CHECK: return %[[PADDED]]
// LINALG-LABEL: func.func @shift_right
// LINALG: %[[KEPT:.*]] = tensor.extract_slice %{{.*}}[0, 0] [3, 2] [1, 1]
// LINALG: tensor.pad %[[KEPT]] low[0, 1] high[0, 0]
func.func @shift_right(%arg0: !torch.vtensor<[3,3],f32>) -> !torch.vtensor<[3,3],f32> {
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %int1, %int-1 : (!torch.int, !torch.int) -> !torch.list<int>
  %float0 = torch.constant.float 0.000000e+00
  %1 = torch.aten.constant_pad_nd %arg0, %0, %float0 : !torch.vtensor<[3,3],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[3,3],f32>
  return %1 : !torch.vtensor<[3,3],f32>
}

// -----

// Only removed elements: the slice alone, its end the dynamic size less the amount.
// CHECK-LABEL: func.func @only_removes
// CHECK: %[[SIZE:.*]] = torch.aten.size.int %arg0, %{{.*}} :
// CHECK: %[[END:.*]] = torch.aten.sub.int %[[SIZE]], %{{.*}} :
// CHECK: %[[KEPT:.*]] = torch.aten.slice.Tensor %arg0, %{{.*}}, %{{.*}}, %[[END]], %{{.*}} : {{.*}} -> !torch.vtensor<[?,3],f32>
// CHECK-NOT: torch.aten.constant_pad_nd
// CHECK: return %[[KEPT]]
func.func @only_removes(%arg0: !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[?,3],f32> {
  %int0 = torch.constant.int 0
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %int0, %int0, %int0, %int-1 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %float0 = torch.constant.float 0.000000e+00
  %1 = torch.aten.constant_pad_nd %arg0, %0, %float0 : !torch.vtensor<[?,3],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[?,3],f32>
  return %1 : !torch.vtensor<[?,3],f32>
}

// -----

// A symbolic amount p of either sign: max(-p, 0) removed, max(p, 0) added, at run time.
// CHECK-LABEL: func.func @symbolic
// CHECK: %[[NEG:.*]] = torch.aten.neg.int %arg1
// CHECK: %[[REMOVED:.*]] = torch.prim.max.int %[[NEG]], %{{.*}}
// CHECK: %[[ADDED:.*]] = torch.prim.max.int %arg1, %{{.*}}
// CHECK: %[[SIZE:.*]] = torch.aten.size.int %arg0
// CHECK: %[[END:.*]] = torch.aten.sub.int %[[SIZE]], %[[REMOVED]]
// CHECK: %[[KEPT:.*]] = torch.aten.slice.Tensor %arg0, %{{.*}}, %{{.*}}, %[[END]], %{{.*}}
// CHECK: %[[AMOUNTS:.*]] = torch.prim.ListConstruct %{{.*}}, %[[ADDED]]
// CHECK: torch.aten.constant_pad_nd %[[KEPT]], %[[AMOUNTS]]
func.func @symbolic(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.int) -> !torch.vtensor<[?,?],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %int1, %arg1 : (!torch.int, !torch.int) -> !torch.list<int>
  %float0 = torch.constant.float 0.000000e+00
  %1 = torch.aten.constant_pad_nd %arg0, %0, %float0 : !torch.vtensor<[?,?],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[?,?],f32>
  return %1 : !torch.vtensor<[?,?],f32>
}

// -----

// Non-negative constant amounts, and a size, stay as they are.
// CHECK-LABEL: func.func @not_negative
// CHECK-NOT: torch.aten.slice.Tensor
// CHECK: %[[AMOUNTS:.*]] = torch.prim.ListConstruct %int1, %[[SIZE:.*]] :
// CHECK: torch.aten.constant_pad_nd %arg0, %[[AMOUNTS]]
func.func @not_negative(%arg0: !torch.vtensor<[3,3],f32>) -> !torch.vtensor<[3,?],f32> {
  %int1 = torch.constant.int 1
  %size = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[3,3],f32>, !torch.int -> !torch.int
  %0 = torch.prim.ListConstruct %int1, %size : (!torch.int, !torch.int) -> !torch.list<int>
  %float0 = torch.constant.float 0.000000e+00
  %1 = torch.aten.constant_pad_nd %arg0, %0, %float0 : !torch.vtensor<[3,3],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[3,?],f32>
  return %1 : !torch.vtensor<[3,?],f32>
}
