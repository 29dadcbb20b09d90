// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-empty-tensors)' | filecheck %s
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-empty-tensors, func.func(convert-torch-to-linalg))' | filecheck %s --check-prefix=LINALG
// A view or concatenation with a static 0 dim becomes an empty tensor of its sizes: torch-mlir's
// view lowering divides by the zero element counts (SIGFPE in the compiler), and a concatenation
// of operands all empty along its dim loses them all (a tensor.concat of nothing).

// CHECK-LABEL: func.func @squeeze_of_empty
// CHECK-NOT: torch.aten.view
// CHECK: torch.prim.ListConstruct %int0, %arg1 :
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %{{.*}}, %arg1 :
// CHECK: %[[EMPTY:.*]] = torch.aten.empty.memory_format %[[SIZES]], %int6, %none, %none, %none, %none : !torch.list<int>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[0,?],f32>
// CHECK: return %[[EMPTY]]
// LINALG-LABEL: func.func @squeeze_of_empty
// LINALG: tensor.empty(%{{.*}}) : tensor<0x?xf32>
func.func @squeeze_of_empty(%arg0: !torch.vtensor<[1,0,?],f32>, %arg1: !torch.int) -> !torch.vtensor<[0,?],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.prim.ListConstruct %int0, %arg1 : (!torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.view %arg0, %0 : !torch.vtensor<[1,0,?],f32>, !torch.list<int> -> !torch.vtensor<[0,?],f32>
  return %1 : !torch.vtensor<[0,?],f32>
}

// -----

// An inferred size is 0: eager infers it only when the other sizes are nonzero.
// CHECK-LABEL: func.func @inferred_size
// CHECK: %[[ZERO:.*]] = torch.constant.int 0
// CHECK: torch.prim.ListConstruct %[[ZERO]], %arg1 :
// CHECK: torch.aten.empty.memory_format {{.*}} -> !torch.vtensor<[?,?],si64>
func.func @inferred_size(%arg0: !torch.vtensor<[?,0],si64>, %arg1: !torch.int) -> !torch.vtensor<[?,?],si64> {
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %int-1, %arg1 : (!torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.view %arg0, %0 : !torch.vtensor<[?,0],si64>, !torch.list<int> -> !torch.vtensor<[?,?],si64>
  return %1 : !torch.vtensor<[?,?],si64>
}

// -----

// The concatenated dim's size is the sum of the operands'; another dynamic dim, the first one's.
// CHECK-LABEL: func.func @cat_of_empty
// CHECK-NOT: torch.aten.cat
// CHECK: %[[A:.*]] = torch.aten.size.int %arg0, %{{.*}}
// CHECK: %[[B:.*]] = torch.aten.size.int %arg1, %{{.*}}
// CHECK: %[[SUM:.*]] = torch.aten.add.int %[[A]], %[[B]]
// CHECK: torch.prim.ListConstruct %{{.*}}, %[[SUM]] :
// CHECK: torch.aten.empty.memory_format
// LINALG-LABEL: func.func @cat_of_empty
// LINALG-NOT: tensor.concat
// LINALG: tensor.empty(%{{.*}}) : tensor<0x?xf32>
func.func @cat_of_empty(%arg0: !torch.vtensor<[0,?],f32>, %arg1: !torch.vtensor<[0,?],f32>) -> !torch.vtensor<[0,?],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg0, %arg1 : (!torch.vtensor<[0,?],f32>, !torch.vtensor<[0,?],f32>) -> !torch.list<vtensor>
  %1 = torch.aten.cat %0, %int1 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[0,?],f32>
  return %1 : !torch.vtensor<[0,?],f32>
}

// -----

// Nothing empty: unchanged.
// CHECK-LABEL: func.func @nonempty
// CHECK: torch.aten.view
// CHECK: torch.aten.cat
func.func @nonempty(%arg0: !torch.vtensor<[2,?],f32>, %arg1: !torch.int) -> !torch.vtensor<[?],f32> {
  %int0 = torch.constant.int 0
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.view %arg0, %0 : !torch.vtensor<[2,?],f32>, !torch.list<int> -> !torch.vtensor<[?],f32>
  %2 = torch.prim.ListConstruct %1, %1 : (!torch.vtensor<[?],f32>, !torch.vtensor<[?],f32>) -> !torch.list<vtensor>
  %3 = torch.aten.cat %2, %int0 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[?],f32>
  return %3 : !torch.vtensor<[?],f32>
}
