// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fold-reversals)' | filecheck %s
// flip → scan → flip along the scanned dim becomes the scan with its `reverse` flag toggled (the
// flips go); a flip of another dim, an unflipped operand or a result used unflipped keeps it.

// CHECK-LABEL: func.func @assoc
// CHECK-NOT:   torch.aten.flip
// CHECK:       %[[R:.+]]:2 = "tidal.associative_scan"(%arg0, %arg1)
// CHECK:       reverse = true
// CHECK-NOT:   torch.aten.flip
// CHECK:       return %[[R]]#1
func.func @assoc(%a: !torch.vtensor<[6,3],f32>, %b: !torch.vtensor<[6,3],f32>) -> !torch.vtensor<[6,3],f32> {
  %int0 = torch.constant.int 0
  %dims = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
  %fa = torch.aten.flip %a, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  %fb = torch.aten.flip %b, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  %r:2 = "tidal.associative_scan"(%fa, %fb) ({
  ^bb0(%l0: !torch.vtensor<[3],f32>, %l1: !torch.vtensor<[3],f32>, %r0: !torch.vtensor<[3],f32>, %r1: !torch.vtensor<[3],f32>):
    %m = torch.aten.mul.Tensor %l0, %r0 : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[3],f32>
    "tidal.yield"(%m, %r1) : (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>) -> ()
  }) {dim = 0 : i64, num_xs = 2 : i64, reverse = false} : (!torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>) -> (!torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>)
  %y = torch.aten.flip %r#1, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  return %y : !torch.vtensor<[6,3],f32>
}

// A scan's carries are not stacked: only its xs and ys flip. Negative dims count from the end.
// CHECK-LABEL: func.func @scan
// CHECK:       %[[S:.+]]:2 = "tidal.scan"(%arg0, %arg1)
// CHECK:       reverse = true
// CHECK-NOT:   torch.aten.flip
// CHECK:       return %[[S]]#0, %[[S]]#1
func.func @scan(%h: !torch.vtensor<[3],f32>, %xs: !torch.vtensor<[6,3],f32>) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>) {
  %intm2 = torch.constant.int -2
  %dims = torch.prim.ListConstruct %intm2 : (!torch.int) -> !torch.list<int>
  %fx = torch.aten.flip %xs, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  %r:2 = "tidal.scan"(%h, %fx) ({
  ^bb0(%c: !torch.vtensor<[3],f32>, %x: !torch.vtensor<[3],f32>):
    %m = torch.aten.mul.Tensor %c, %x : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[3],f32>
    "tidal.yield"(%m, %m) : (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>)
  %ys = torch.aten.flip %r#1, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  return %r#0, %ys : !torch.vtensor<[3],f32>, !torch.vtensor<[6,3],f32>
}

// CHECK-LABEL: func.func @kept
// CHECK:       torch.aten.flip
// CHECK:       "tidal.associative_scan"
// CHECK:       reverse = false
// CHECK:       torch.aten.flip
func.func @kept(%a: !torch.vtensor<[6,3],f32>) -> (!torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>) {
  %int0 = torch.constant.int 0
  %dims = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
  %fa = torch.aten.flip %a, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  %r = "tidal.associative_scan"(%fa) ({
  ^bb0(%l: !torch.vtensor<[3],f32>, %r: !torch.vtensor<[3],f32>):
    %m = torch.aten.mul.Tensor %l, %r : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[3],f32>
    "tidal.yield"(%m) : (!torch.vtensor<[3],f32>) -> ()
  }) {dim = 0 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[6,3],f32>) -> !torch.vtensor<[6,3],f32>
  %y = torch.aten.flip %r, %dims : !torch.vtensor<[6,3],f32>, !torch.list<int> -> !torch.vtensor<[6,3],f32>
  return %y, %r : !torch.vtensor<[6,3],f32>, !torch.vtensor<[6,3],f32>
}
