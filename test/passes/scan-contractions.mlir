// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-scan-contractions)' | filecheck %s
// A scan's thin per-step matmuls move out of it: x_t·W by a weight becomes one matmul of the
// stacked xs before the loop (read back as one more xs); a carry that only accumulates A_t·B_t
// becomes one matmul after it over the factors stacked along the contracted dim.

// CHECK-LABEL: func.func @fwd
// CHECK:       %[[FLAT:.+]] = torch.aten.flatten.using_ints %arg1, %{{.+}}, %{{.+}} : !torch.vtensor<[6,4,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[24,3],f32>
// CHECK:       %[[P:.+]] = torch.aten.mm %[[FLAT]], %arg2 : {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[PV:.+]] = torch.aten.view %[[P]], %{{.+}} -> !torch.vtensor<[6,4,8],f32>
// CHECK:       "tidal.scan"(%arg0, %arg1, %[[PV]], %arg2, %arg3)
// CHECK-NEXT:  ^bb0(%[[C:.+]]: !torch.vtensor<[4,8],f32>, %{{.+}}: !torch.vtensor<[4,3],f32>, %[[XW:.+]]: !torch.vtensor<[4,8],f32>, %{{.+}}: !torch.vtensor<[3,8],f32>, %[[U:.+]]: !torch.vtensor<[8,8],f32>):
// CHECK:       %[[HU:.+]] = torch.aten.mm %[[C]], %[[U]]
// CHECK:       torch.aten.add.Tensor %[[XW]], %[[HU]]
// CHECK:       num_carries = 1 : i64, num_xs = 2 : i64
func.func @fwd(%h: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[6,4,3],f32>, %w: !torch.vtensor<[3,8],f32>, %u: !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>) {
  %r:2 = "tidal.scan"(%h, %xs, %w, %u) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,3],f32>, %cw: !torch.vtensor<[3,8],f32>, %cu: !torch.vtensor<[8,8],f32>):
    %int1 = torch.constant.int 1
    %a = torch.aten.mm %x, %cw : !torch.vtensor<[4,3],f32>, !torch.vtensor<[3,8],f32> -> !torch.vtensor<[4,8],f32>
    %b = torch.aten.mm %c, %cu : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32> -> !torch.vtensor<[4,8],f32>
    %s = torch.aten.add.Tensor %a, %b, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    %t = torch.aten.tanh %s : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%t, %t) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,3],f32>, !torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>
}

// The weight cotangents leave the reverse scan: dW from the xs as it is (its transpose becomes the
// stacked matrix's), dU from the stacked h_t, both against the per-step p stacked as a new output.
// CHECK-LABEL: func.func @bwd
// CHECK:       %[[S:.+]]:2 = "tidal.scan"(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT:  ^bb0(%[[G:.+]]: !torch.vtensor<[4,8],f32>, %[[H:.+]]: !torch.vtensor<[4,8],f32>, %{{.+}}: !torch.vtensor<[4,3],f32>, %[[CU:.+]]: !torch.vtensor<[8,8],f32>):
// CHECK:       %[[PP:.+]] = torch.aten.mul.Tensor %[[G]], %[[H]]
// CHECK-NOT:   torch.aten.add.Tensor
// CHECK:       %[[G2:.+]] = torch.aten.mm %[[PP]], %{{.+}}
// CHECK-NEXT:  "tidal.yield"(%[[G2]], %[[PP]])
// CHECK:       num_carries = 1 : i64, num_xs = 2 : i64, reverse = true
// CHECK:       %[[XF:.+]] = torch.aten.flatten.using_ints %arg2, {{.+}} -> !torch.vtensor<[24,3],f32>
// CHECK:       %[[PF:.+]] = torch.aten.flatten.using_ints %[[S]]#1, {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[XT:.+]] = torch.aten.permute %[[XF]], {{.+}} -> !torch.vtensor<[3,24],f32>
// CHECK:       %[[DW:.+]] = torch.aten.mm %[[XT]], %[[PF]] : {{.+}} -> !torch.vtensor<[3,8],f32>
// CHECK:       %[[DW2:.+]] = torch.aten.add.Tensor %0, %[[DW]]
// CHECK:       %[[HF:.+]] = torch.aten.flatten.using_ints %arg1, {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[PF2:.+]] = torch.aten.flatten.using_ints %[[S]]#1
// CHECK:       %[[HT:.+]] = torch.aten.permute %[[HF]], {{.+}} -> !torch.vtensor<[8,24],f32>
// CHECK:       %[[DU:.+]] = torch.aten.mm %[[HT]], %[[PF2]] : {{.+}} -> !torch.vtensor<[8,8],f32>
// CHECK:       %[[DU2:.+]] = torch.aten.add.Tensor %1, %[[DU]]
// CHECK:       return %[[DW2]], %[[DU2]]
func.func @bwd(%dh: !torch.vtensor<[4,8],f32>, %hs: !torch.vtensor<[6,4,8],f32>, %xs: !torch.vtensor<[6,4,3],f32>, %u: !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>) {
  %z1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<3x8xf32>) : !torch.vtensor<[3,8],f32>
  %z2 = torch.vtensor.literal(dense<0.000000e+00> : tensor<8x8xf32>) : !torch.vtensor<[8,8],f32>
  %r:3 = "tidal.scan"(%dh, %z1, %z2, %hs, %xs, %u) ({
  ^bb0(%g: !torch.vtensor<[4,8],f32>, %dw: !torch.vtensor<[3,8],f32>, %du: !torch.vtensor<[8,8],f32>, %h: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,3],f32>, %cu: !torch.vtensor<[8,8],f32>):
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %p = torch.aten.mul.Tensor %g, %h : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
    %xt = torch.aten.permute %x, %perm : !torch.vtensor<[4,3],f32>, !torch.list<int> -> !torch.vtensor<[3,4],f32>
    %m1 = torch.aten.mm %xt, %p : !torch.vtensor<[3,4],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[3,8],f32>
    %dw2 = torch.aten.add.Tensor %dw, %m1, %int1 : !torch.vtensor<[3,8],f32>, !torch.vtensor<[3,8],f32>, !torch.int -> !torch.vtensor<[3,8],f32>
    %ht = torch.aten.t %h : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,4],f32>
    %m2 = torch.aten.mm %ht, %p : !torch.vtensor<[8,4],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,8],f32>
    %du2 = torch.aten.add.Tensor %m2, %du, %int1 : !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,8],f32>, !torch.int -> !torch.vtensor<[8,8],f32>
    %ut = torch.aten.t %cu : !torch.vtensor<[8,8],f32> -> !torch.vtensor<[8,8],f32>
    %g2 = torch.aten.mm %p, %ut : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32> -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%g2, %dw2, %du2) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 3 : i64, num_xs = 2 : i64, reverse = true} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[6,4,3],f32>, !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>)
  return %r#1, %r#2 : !torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>
}

// A product 32x the slice it comes from (logits from a hidden state) stays in the loop: a scan over
// chunks may be there so that the whole product never exists.
// CHECK-LABEL: func.func @logits_stay
// CHECK-NOT:   torch.aten.flatten.using_ints
// CHECK:       "tidal.scan"
// CHECK:       torch.aten.mm
func.func @logits_stay(%l: !torch.vtensor<[],f32>, %hs: !torch.vtensor<[5,4,2],f32>, %w: !torch.vtensor<[2,64],f32>) -> !torch.vtensor<[],f32> {
  %r = "tidal.scan"(%l, %hs, %w) ({
  ^bb0(%c: !torch.vtensor<[],f32>, %h: !torch.vtensor<[4,2],f32>, %cw: !torch.vtensor<[2,64],f32>):
    %int1 = torch.constant.int 1
    %none = torch.constant.none
    %z = torch.aten.mm %h, %cw : !torch.vtensor<[4,2],f32>, !torch.vtensor<[2,64],f32> -> !torch.vtensor<[4,64],f32>
    %s = torch.aten.sum %z, %none : !torch.vtensor<[4,64],f32>, !torch.none -> !torch.vtensor<[],f32>
    %c2 = torch.aten.add.Tensor %c, %s, %int1 : !torch.vtensor<[],f32>, !torch.vtensor<[],f32>, !torch.int -> !torch.vtensor<[],f32>
    "tidal.yield"(%c2) : (!torch.vtensor<[],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[],f32>, !torch.vtensor<[5,4,2],f32>, !torch.vtensor<[2,64],f32>) -> !torch.vtensor<[],f32>
  return %r : !torch.vtensor<[],f32>
}

// A dynamic length: the product is viewed back with the xs's own size.
// CHECK-LABEL: func.func @dynamic_length
// CHECK:       %[[P:.+]] = torch.aten.mm %{{.+}}, %arg2 : !torch.vtensor<[?,3],f32>, !torch.vtensor<[3,8],f32> -> !torch.vtensor<[?,8],f32>
// CHECK:       %[[T:.+]] = torch.aten.size.int %arg1, %{{.+}}
// CHECK:       %[[SIZES:.+]] = torch.prim.ListConstruct %[[T]],
// CHECK:       torch.aten.view %[[P]], %[[SIZES]] : {{.+}} -> !torch.vtensor<[?,4,8],f32>
func.func @dynamic_length(%h: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[?,4,3],f32>, %w: !torch.vtensor<[3,8],f32>) -> !torch.vtensor<[4,8],f32> {
  %r:2 = "tidal.scan"(%h, %xs, %w) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,3],f32>, %cw: !torch.vtensor<[3,8],f32>):
    %int1 = torch.constant.int 1
    %a = torch.aten.mm %x, %cw : !torch.vtensor<[4,3],f32>, !torch.vtensor<[3,8],f32> -> !torch.vtensor<[4,8],f32>
    %s = torch.aten.add.Tensor %a, %c, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%s, %c) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,3],f32>, !torch.vtensor<[3,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,8],f32>)
  return %r#0 : !torch.vtensor<[4,8],f32>
}

// An accumulator the step also reads is a real carry: it stays.
// CHECK-LABEL: func.func @acc_also_read
// CHECK:       "tidal.scan"
// CHECK:       num_carries = 2 : i64
// CHECK-NOT:   torch.aten.flatten.using_ints
func.func @acc_also_read(%g: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[6,4,8],f32>) -> !torch.vtensor<[8,8],f32> {
  %z = torch.vtensor.literal(dense<0.000000e+00> : tensor<8x8xf32>) : !torch.vtensor<[8,8],f32>
  %r:2 = "tidal.scan"(%g, %z, %xs) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %acc: !torch.vtensor<[8,8],f32>, %x: !torch.vtensor<[4,8],f32>):
    %int1 = torch.constant.int 1
    %xt = torch.aten.t %x : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,4],f32>
    %m = torch.aten.mm %xt, %c : !torch.vtensor<[8,4],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,8],f32>
    %acc2 = torch.aten.add.Tensor %acc, %m, %int1 : !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,8],f32>, !torch.int -> !torch.vtensor<[8,8],f32>
    %c2 = torch.aten.mm %c, %acc : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32> -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%c2, %acc2) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 2 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32>, !torch.vtensor<[6,4,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32>)
  return %r#1 : !torch.vtensor<[8,8],f32>
}

// A bias's cotangent, Σ_t sum over the rows of g_t, is one sum after the loop over time and rows.
// CHECK-LABEL: func.func @bias_sum
// CHECK:       %[[S:.+]]:2 = "tidal.scan"
// CHECK:       num_carries = 1 : i64
// CHECK:       %[[T:.+]] = torch.aten.sum.dim_IntList %[[S]]#1, %{{.+}}, %false, %none : !torch.vtensor<[6,4,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[8],f32>
// CHECK:       torch.aten.add.Tensor %arg1, %[[T]]
func.func @bias_sum(%g: !torch.vtensor<[4,8],f32>, %db: !torch.vtensor<[8],f32>, %xs: !torch.vtensor<[6,4,8],f32>) -> !torch.vtensor<[8],f32> {
  %r:2 = "tidal.scan"(%g, %db, %xs) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %acc: !torch.vtensor<[8],f32>, %x: !torch.vtensor<[4,8],f32>):
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %int8 = torch.constant.int 8
    %true = torch.constant.bool true
    %none = torch.constant.none
    %p = torch.aten.mul.Tensor %c, %x : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    %dims = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
    %s = torch.aten.sum.dim_IntList %p, %dims, %true, %none : !torch.vtensor<[4,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[1,8],f32>
    %shape = torch.prim.ListConstruct %int8 : (!torch.int) -> !torch.list<int>
    %v = torch.aten.view %s, %shape : !torch.vtensor<[1,8],f32>, !torch.list<int> -> !torch.vtensor<[8],f32>
    %acc2 = torch.aten.add.Tensor %acc, %v, %int1 : !torch.vtensor<[8],f32>, !torch.vtensor<[8],f32>, !torch.int -> !torch.vtensor<[8],f32>
    "tidal.yield"(%p, %acc2) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 2 : i64, num_xs = 1 : i64, reverse = true} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[8],f32>, !torch.vtensor<[6,4,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[8],f32>)
  return %r#1 : !torch.vtensor<[8],f32>
}

// No dims is every dim: a loss summed over each chunk is one sum of every chunk's terms, read from
// the output the scan already stacks (no second copy of it).
// CHECK-LABEL: func.func @full_sum
// CHECK:       %[[S:.+]] = "tidal.scan"(%arg1)
// CHECK:       num_carries = 0 : i64
// CHECK-SAME:  -> !torch.vtensor<[6,4],f32>
// CHECK:       torch.aten.sum.dim_IntList %[[S]], {{.+}} : !torch.vtensor<[6,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
func.func @full_sum(%l: !torch.vtensor<[],f32>, %xs: !torch.vtensor<[6,4],f32>) -> !torch.vtensor<[],f32> {
  %r:2 = "tidal.scan"(%l, %xs) ({
  ^bb0(%acc: !torch.vtensor<[],f32>, %x: !torch.vtensor<[4],f32>):
    %int1 = torch.constant.int 1
    %false = torch.constant.bool false
    %none = torch.constant.none
    %e = torch.aten.exp %x : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
    %dims = torch.prim.ListConstruct : () -> !torch.list<int>
    %s = torch.aten.sum.dim_IntList %e, %dims, %false, %none : !torch.vtensor<[4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
    %acc2 = torch.aten.add.Tensor %acc, %s, %int1 : !torch.vtensor<[],f32>, !torch.vtensor<[],f32>, !torch.int -> !torch.vtensor<[],f32>
    "tidal.yield"(%acc2, %e) : (!torch.vtensor<[],f32>, !torch.vtensor<[4],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[],f32>, !torch.vtensor<[6,4],f32>) -> (!torch.vtensor<[],f32>, !torch.vtensor<[6,4],f32>)
  return %r#0 : !torch.vtensor<[],f32>
}

// nn.LSTM's adjoint (weights stored [4H, H]) accumulates (p_tᵀ·h_t)ᵀᵀ: the two transposes cancel,
// and the product leaves the loop as one matmul after it.
// CHECK-LABEL: func.func @double_transpose
// CHECK:       "tidal.scan"
// CHECK-NOT:   torch.aten.add.Tensor
// CHECK:       "tidal.yield"
// CHECK:       num_carries = 0 : i64
// CHECK:       %[[DU:.+]] = torch.aten.mm {{.+}} -> !torch.vtensor<[8,8],f32>
// CHECK:       torch.aten.add.Tensor %arg0, %[[DU]]
func.func @double_transpose(%acc: !torch.vtensor<[8,8],f32>, %ps: !torch.vtensor<[6,4,8],f32>, %hs: !torch.vtensor<[6,4,8],f32>) -> !torch.vtensor<[8,8],f32> {
  %r = "tidal.scan"(%acc, %ps, %hs) ({
  ^bb0(%c: !torch.vtensor<[8,8],f32>, %p: !torch.vtensor<[4,8],f32>, %h: !torch.vtensor<[4,8],f32>):
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
    %pt = torch.aten.permute %p, %perm : !torch.vtensor<[4,8],f32>, !torch.list<int> -> !torch.vtensor<[8,4],f32>
    %m = torch.aten.mm %pt, %h : !torch.vtensor<[8,4],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,8],f32>
    %mt = torch.aten.permute %m, %perm : !torch.vtensor<[8,8],f32>, !torch.list<int> -> !torch.vtensor<[8,8],f32>
    %mtt = torch.aten.permute %mt, %perm : !torch.vtensor<[8,8],f32>, !torch.list<int> -> !torch.vtensor<[8,8],f32>
    %s = torch.aten.add.Tensor %c, %mtt, %int1 : !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,8],f32>, !torch.int -> !torch.vtensor<[8,8],f32>
    "tidal.yield"(%s) : (!torch.vtensor<[8,8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 2 : i64, reverse = true} : (!torch.vtensor<[8,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[6,4,8],f32>) -> !torch.vtensor<[8,8],f32>
  return %r : !torch.vtensor<[8,8],f32>
}
