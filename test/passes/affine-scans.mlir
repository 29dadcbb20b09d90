// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-affine-scans)' | filecheck %s
// A scan whose carry is affine in itself (h' = a_t h + b_t) becomes an associative_scan of the
// pairs (a_t, b_t), the ops computing them lifted over the stacked xs; the per-step outputs read
// the scanned states (h') or them shifted by one step with h0 (h).

// h' = exp(g_t) h + x_t from h0 = 0: the states are the scan's second result.
// CHECK-LABEL: func.func @gated
// CHECK-NOT:   tidal.scan
// CHECK:       %[[A:.+]] = torch.aten.exp %arg0 : !torch.vtensor<[8,2,16],f32>
// CHECK:       %[[S:.+]]:2 = "tidal.associative_scan"(%[[A]], %arg1)
// CHECK:       ^bb0(%[[A1:.+]]: !torch.vtensor<[2,16],f32>, %[[B1:.+]]: !torch.vtensor<[2,16],f32>, %[[A2:.+]]: !torch.vtensor<[2,16],f32>, %[[B2:.+]]: !torch.vtensor<[2,16],f32>):
// CHECK:       %[[P:.+]] = torch.aten.mul.Tensor %[[A2]], %[[B1]]
// CHECK:       %[[Q:.+]] = torch.aten.add.Tensor %[[P]], %[[B2]]
// CHECK:       %[[R:.+]] = torch.aten.mul.Tensor %[[A1]], %[[A2]]
// CHECK:       "tidal.yield"(%[[R]], %[[Q]])
// CHECK:       reverse = false
// CHECK:       return %[[S]]#1
func.func @gated(%g: !torch.vtensor<[8,2,16],f32>, %x: !torch.vtensor<[8,2,16],f32>) -> !torch.vtensor<[8,2,16],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<2x16xf32>) : !torch.vtensor<[2,16],f32>
  %r:2 = "tidal.scan"(%0, %g, %x) ({
  ^bb0(%h: !torch.vtensor<[2,16],f32>, %gt: !torch.vtensor<[2,16],f32>, %xt: !torch.vtensor<[2,16],f32>):
    %int1 = torch.constant.int 1
    %e = torch.aten.exp %gt : !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %m = torch.aten.mul.Tensor %e, %h : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %n = torch.aten.add.Tensor %m, %xt, %int1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.int -> !torch.vtensor<[2,16],f32>
    "tidal.yield"(%n, %n) : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 2 : i64, reverse = false} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[8,2,16],f32>, !torch.vtensor<[8,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[8,2,16],f32>)
  return %r#1 : !torch.vtensor<[8,2,16],f32>
}

// Its adjoint (what tidal's autodiff makes): λ' = (λ + ȳ_t) e_t, reverse, from a given λ0; the
// per-step outputs read λ + ȳ_t (λ before the step: the states shifted by one, then λ0); the
// final carry is the first state.
// CHECK-LABEL: func.func @adjoint
// CHECK-NOT:   tidal.scan
// CHECK:       %[[E:.+]] = torch.aten.exp %arg2 : !torch.vtensor<[7,2,16],f32>
// CHECK:       %[[B:.+]] = torch.aten.mul.Tensor %arg3, %[[E]]
// CHECK:       %[[S:.+]]:2 = "tidal.associative_scan"(%[[E]], %[[B]])
// CHECK:       reverse = true
// CHECK:       %[[PH:.+]] = torch.aten.mul.Tensor %[[S]]#0, %arg0 : !torch.vtensor<[7,2,16],f32>, !torch.vtensor<[2,16],f32>
// CHECK:       %[[ST:.+]] = torch.aten.add.Tensor %[[PH]], %[[S]]#1
// CHECK:       %[[L0:.+]] = torch.aten.unsqueeze %arg0
// CHECK:       %[[PADDED:.+]] = torch.aten.cat {{.*}} -> !torch.vtensor<[8,2,16],f32>
// CHECK:       %[[BEFORE:.+]] = torch.aten.slice.Tensor %[[PADDED]], {{.*}} -> !torch.vtensor<[7,2,16],f32>
// CHECK:       %[[DH:.+]] = torch.aten.add.Tensor %[[BEFORE]], %arg3
// CHECK:       %[[FIRST:.+]] = torch.aten.slice.Tensor %[[ST]], {{.*}} -> !torch.vtensor<[1,2,16],f32>
// CHECK:       %[[FINAL:.+]] = torch.aten.squeeze.dim %[[FIRST]]
// CHECK:       return %[[FINAL]], %{{.+}}, %[[DH]]
func.func @adjoint(%lam0: !torch.vtensor<[2,16],f32>, %h: !torch.vtensor<[7,2,16],f32>, %g: !torch.vtensor<[7,2,16],f32>, %ybar: !torch.vtensor<[7,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[7,2,16],f32>, !torch.vtensor<[7,2,16],f32>) {
  %r:3 = "tidal.scan"(%lam0, %h, %g, %ybar) ({
  ^bb0(%l: !torch.vtensor<[2,16],f32>, %ht: !torch.vtensor<[2,16],f32>, %gt: !torch.vtensor<[2,16],f32>, %yt: !torch.vtensor<[2,16],f32>):
    %int1 = torch.constant.int 1
    %e = torch.aten.exp %gt : !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %dh = torch.aten.add.Tensor %l, %yt, %int1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.int -> !torch.vtensor<[2,16],f32>
    %next = torch.aten.mul.Tensor %dh, %e : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %p = torch.aten.mul.Tensor %dh, %ht : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %dg = torch.aten.mul.Tensor %p, %e : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    "tidal.yield"(%next, %dg, %dh) : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 3 : i64, reverse = true} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[7,2,16],f32>, !torch.vtensor<[7,2,16],f32>, !torch.vtensor<[7,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[7,2,16],f32>, !torch.vtensor<[7,2,16],f32>)
  return %r#0, %r#1, %r#2 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[7,2,16],f32>, !torch.vtensor<[7,2,16],f32>
}

// Not affine (tanh of h) and a constant decay (no per-step pair to scan): each keeps its loop.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: "tidal.scan"
// CHECK-NOT:   tidal.associative_scan
func.func @kept(%h0: !torch.vtensor<[2,16],f32>, %x: !torch.vtensor<[8,2,16],f32>, %decay: !torch.vtensor<[16],f32>) -> (!torch.vtensor<[8,2,16],f32>, !torch.vtensor<[8,2,16],f32>) {
  %a:2 = "tidal.scan"(%h0, %x) ({
  ^bb0(%h: !torch.vtensor<[2,16],f32>, %xt: !torch.vtensor<[2,16],f32>):
    %int1 = torch.constant.int 1
    %s = torch.aten.add.Tensor %h, %xt, %int1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.int -> !torch.vtensor<[2,16],f32>
    %t = torch.aten.tanh %s : !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    "tidal.yield"(%t, %t) : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[8,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[8,2,16],f32>)
  %b:2 = "tidal.scan"(%h0, %x, %decay) ({
  ^bb0(%h: !torch.vtensor<[2,16],f32>, %xt: !torch.vtensor<[2,16],f32>, %d: !torch.vtensor<[16],f32>):
    %int1 = torch.constant.int 1
    %m = torch.aten.mul.Tensor %d, %h : !torch.vtensor<[16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %n = torch.aten.add.Tensor %m, %xt, %int1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.int -> !torch.vtensor<[2,16],f32>
    "tidal.yield"(%n, %n) : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[8,2,16],f32>, !torch.vtensor<[16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[8,2,16],f32>)
  return %a#1, %b#1 : !torch.vtensor<[8,2,16],f32>, !torch.vtensor<[8,2,16],f32>
}

// A dynamic number of steps (maybe none): the final carry is the last row of h0 and the states
// (h0 itself when there is no step).
// CHECK-LABEL: func.func @dynamic_length
// CHECK-NOT:   tidal.scan
// CHECK:       %[[S:.+]]:2 = "tidal.associative_scan"(%arg1, %arg2)
// CHECK:       %[[PH:.+]] = torch.aten.mul.Tensor %[[S]]#0, %arg0
// CHECK:       %[[ST:.+]] = torch.aten.add.Tensor %[[PH]], %[[S]]#1
// CHECK:       %[[H0:.+]] = torch.aten.unsqueeze %arg0
// CHECK:       %[[PADDED:.+]] = torch.aten.cat {{.*}} -> !torch.vtensor<[?,2,16],f32>
// CHECK:       %[[LAST:.+]] = torch.aten.slice.Tensor %[[PADDED]], {{.*}} -> !torch.vtensor<[1,2,16],f32>
// CHECK:       %[[FINAL:.+]] = torch.aten.squeeze.dim %[[LAST]]
// CHECK:       return %[[FINAL]], %[[ST]]
func.func @dynamic_length(%h0: !torch.vtensor<[2,16],f32>, %g: !torch.vtensor<[?,2,16],f32>, %x: !torch.vtensor<[?,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[?,2,16],f32>) {
  %r:2 = "tidal.scan"(%h0, %g, %x) ({
  ^bb0(%h: !torch.vtensor<[2,16],f32>, %gt: !torch.vtensor<[2,16],f32>, %xt: !torch.vtensor<[2,16],f32>):
    %int1 = torch.constant.int 1
    %m = torch.aten.mul.Tensor %gt, %h : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %n = torch.aten.add.Tensor %m, %xt, %int1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.int -> !torch.vtensor<[2,16],f32>
    "tidal.yield"(%n, %n) : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 2 : i64, reverse = false} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[?,2,16],f32>, !torch.vtensor<[?,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[?,2,16],f32>)
  return %r#0, %r#1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[?,2,16],f32>
}

// A per-step factor of lower rank than the carry ([16] against [2, 16]) would, stacked ([T, 16]),
// line its steps up with the carry's rows (T = 2 = B here): kept, not rewritten into a wrong sum.
// CHECK-LABEL: func.func @misaligned
// CHECK:       "tidal.scan"
// CHECK-NOT:   tidal.associative_scan
func.func @misaligned(%h0: !torch.vtensor<[2,16],f32>, %u: !torch.vtensor<[2,2,16],f32>, %a: !torch.vtensor<[2,16],f32>, %x: !torch.vtensor<[2,2,16],f32>) -> !torch.vtensor<[2,2,16],f32> {
  %r:2 = "tidal.scan"(%h0, %u, %a, %x) ({
  ^bb0(%h: !torch.vtensor<[2,16],f32>, %ut: !torch.vtensor<[2,16],f32>, %at: !torch.vtensor<[16],f32>, %xt: !torch.vtensor<[2,16],f32>):
    %int1 = torch.constant.int 1
    %m = torch.aten.mul.Tensor %h, %ut : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32> -> !torch.vtensor<[2,16],f32>
    %k = torch.aten.mul.Tensor %m, %at : !torch.vtensor<[2,16],f32>, !torch.vtensor<[16],f32> -> !torch.vtensor<[2,16],f32>
    %n = torch.aten.add.Tensor %k, %xt, %int1 : !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.int -> !torch.vtensor<[2,16],f32>
    "tidal.yield"(%n, %n) : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 3 : i64, reverse = false} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,2,16],f32>, !torch.vtensor<[2,16],f32>, !torch.vtensor<[2,2,16],f32>) -> (!torch.vtensor<[2,16],f32>, !torch.vtensor<[2,2,16],f32>)
  return %r#1 : !torch.vtensor<[2,2,16],f32>
}
