// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-scan-contractions)' | filecheck %s
// A per-step output that is only stacked, y_t = A_t·W by a weight, leaves the scan: the step yields
// A_t (nothing new when A_t is already stacked or is an xs slice) and one matmul of the stacked A by
// W after the loop makes the stacked output.

// An RNN's adjoint when x requires grad: dx_t = dz_t·Wᵀ is only stacked, and dz_t is already a
// stacked output (the weights' cotangents read it): the reverse scan keeps dh·Uᵀ only, and dx is
// one [T·B, H]·[H, I] matmul of the stacked dz after it.
// CHECK-LABEL: func.func @rnn_adjoint
// CHECK:       %[[S:.+]]:2 = "tidal.scan"(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT:  ^bb0(%[[G:.+]]: !torch.vtensor<[4,8],f32>, %[[H:.+]]: !torch.vtensor<[4,8],f32>, %{{.+}}: !torch.vtensor<[3,8],f32>, %[[CU:.+]]: !torch.vtensor<[8,8],f32>):
// CHECK:       %[[DZ:.+]] = torch.aten.mul.Tensor %[[G]], %[[H]]
// CHECK-NOT:   torch.aten.permute
// CHECK:       %[[UT:.+]] = torch.aten.t %[[CU]]
// CHECK-NEXT:  %[[G2:.+]] = torch.aten.mm %[[DZ]], %[[UT]]
// CHECK-NEXT:  "tidal.yield"(%[[G2]], %[[DZ]])
// CHECK:       {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = true}
// CHECK-SAME:  -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>)
// CHECK:       %[[WT:.+]] = torch.aten.permute %arg2, %{{.+}} -> !torch.vtensor<[8,3],f32>
// CHECK:       %[[F:.+]] = torch.aten.flatten.using_ints %[[S]]#1, {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[P:.+]] = torch.aten.mm %[[F]], %[[WT]] : {{.+}} -> !torch.vtensor<[24,3],f32>
// CHECK:       %[[DX:.+]] = torch.aten.view %[[P]], %{{.+}} -> !torch.vtensor<[6,4,3],f32>
// CHECK:       return %[[S]]#0, %[[S]]#1, %[[DX]]
func.func @rnn_adjoint(%dh: !torch.vtensor<[4,8],f32>, %hs: !torch.vtensor<[6,4,8],f32>, %w: !torch.vtensor<[3,8],f32>, %u: !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[6,4,3],f32>) {
  %r:3 = "tidal.scan"(%dh, %hs, %w, %u) ({
  ^bb0(%g: !torch.vtensor<[4,8],f32>, %h: !torch.vtensor<[4,8],f32>, %cw: !torch.vtensor<[3,8],f32>, %cu: !torch.vtensor<[8,8],f32>):
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %dz = torch.aten.mul.Tensor %g, %h : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    %perm = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
    %wt = torch.aten.permute %cw, %perm : !torch.vtensor<[3,8],f32>, !torch.list<int> -> !torch.vtensor<[8,3],f32>
    %dx = torch.aten.mm %dz, %wt : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,3],f32> -> !torch.vtensor<[4,3],f32>
    %ut = torch.aten.t %cu : !torch.vtensor<[8,8],f32> -> !torch.vtensor<[8,8],f32>
    %g2 = torch.aten.mm %dz, %ut : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32> -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%g2, %dz, %dx) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,3],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = true} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[3,8],f32>, !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[6,4,3],f32>)
  return %r#0, %r#1, %r#2 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[6,4,3],f32>
}

// An output projection of the new carry, y_t = h_t·V: the step stacks h_t (one more output) and
// the projection of all steps is one matmul after the loop.
// CHECK-LABEL: func.func @projection
// CHECK:       %[[S:.+]]:2 = "tidal.scan"(%arg0, %arg1, %arg2, %arg3)
// CHECK:       %[[T:.+]] = torch.aten.tanh
// CHECK-NEXT:  "tidal.yield"(%[[T]], %[[T]])
// CHECK:       reverse = false}
// CHECK-SAME:  -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>)
// CHECK:       %[[F:.+]] = torch.aten.flatten.using_ints %[[S]]#1, {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[P:.+]] = torch.aten.mm %[[F]], %arg3 : {{.+}} -> !torch.vtensor<[24,16],f32>
// CHECK:       %[[Y:.+]] = torch.aten.view %[[P]], %{{.+}} -> !torch.vtensor<[6,4,16],f32>
// CHECK:       return %[[S]]#0, %[[Y]]
func.func @projection(%h0: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[6,4,8],f32>, %u: !torch.vtensor<[8,8],f32>, %v: !torch.vtensor<[8,16],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,16],f32>) {
  %r:2 = "tidal.scan"(%h0, %xs, %u, %v) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,8],f32>, %cu: !torch.vtensor<[8,8],f32>, %cv: !torch.vtensor<[8,16],f32>):
    %int1 = torch.constant.int 1
    %a = torch.aten.mm %c, %cu : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32> -> !torch.vtensor<[4,8],f32>
    %s = torch.aten.add.Tensor %a, %x, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    %t = torch.aten.tanh %s : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    %y = torch.aten.mm %t, %cv : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
    "tidal.yield"(%t, %y) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,16],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,16],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,16],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,16],f32>
}

// y_t = x_t·W of an xs slice is the xs times W: nothing is stacked for it, the scan keeps its carry.
// CHECK-LABEL: func.func @of_xs
// CHECK:       %[[S:.+]] = "tidal.scan"(%arg0, %arg1, %arg2)
// CHECK-NOT:   torch.aten.mm
// CHECK:       "tidal.yield"(%{{[0-9]+}}) :
// CHECK:       num_carries = 1 : i64, num_xs = 1 : i64
// CHECK-SAME:  -> !torch.vtensor<[4,8],f32>{{$}}
// CHECK:       %[[F:.+]] = torch.aten.flatten.using_ints %arg1, {{.+}} -> !torch.vtensor<[24,3],f32>
// CHECK:       %[[P:.+]] = torch.aten.mm %[[F]], %arg2 : {{.+}} -> !torch.vtensor<[24,5],f32>
// CHECK:       %[[Y:.+]] = torch.aten.view %[[P]], %{{.+}} -> !torch.vtensor<[6,4,5],f32>
// CHECK:       return %[[S]], %[[Y]]
func.func @of_xs(%c0: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[6,4,3],f32>, %w: !torch.vtensor<[3,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,5],f32>) {
  %r:2 = "tidal.scan"(%c0, %xs, %w) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,3],f32>, %cw: !torch.vtensor<[3,5],f32>):
    %y = torch.aten.mm %x, %cw : !torch.vtensor<[4,3],f32>, !torch.vtensor<[3,5],f32> -> !torch.vtensor<[4,5],f32>
    %c2 = torch.aten.tanh %c : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%c2, %y) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,3],f32>, !torch.vtensor<[3,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,5],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,5],f32>
}

// A product the step also uses (here for the next carry) stays in the loop.
// CHECK-LABEL: func.func @also_used
// CHECK:       "tidal.scan"
// CHECK:       torch.aten.mm
// CHECK:       "tidal.yield"
// CHECK-NOT:   torch.aten.flatten.using_ints
// CHECK:       return
func.func @also_used(%c0: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[6,4,8],f32>, %u: !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>) {
  %r:2 = "tidal.scan"(%c0, %xs, %u) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,8],f32>, %cu: !torch.vtensor<[8,8],f32>):
    %int1 = torch.constant.int 1
    %y = torch.aten.mm %c, %cu : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,8],f32> -> !torch.vtensor<[4,8],f32>
    %c2 = torch.aten.add.Tensor %y, %x, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    "tidal.yield"(%c2, %y) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>, !torch.vtensor<[8,8],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[6,4,8],f32>
}

// Scanned along dim 1, outputs stack along dim 1 ([B, T, ·]): still one matmul over the leading dims.
// CHECK-LABEL: func.func @dim1
// CHECK:       %[[S:.+]]:2 = "tidal.scan"
// CHECK:       dim = 1 : i64
// CHECK-SAME:  -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,6,8],f32>)
// CHECK:       %[[F:.+]] = torch.aten.flatten.using_ints %[[S]]#1, {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[P:.+]] = torch.aten.mm %[[F]], %arg2 : {{.+}} -> !torch.vtensor<[24,5],f32>
// CHECK:       %[[Y:.+]] = torch.aten.view %[[P]], %{{.+}} -> !torch.vtensor<[4,6,5],f32>
// CHECK:       return %[[S]]#0, %[[Y]]
func.func @dim1(%c0: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[4,6,8],f32>, %v: !torch.vtensor<[8,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,6,5],f32>) {
  %r:2 = "tidal.scan"(%c0, %xs, %v) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,8],f32>, %cv: !torch.vtensor<[8,5],f32>):
    %int1 = torch.constant.int 1
    %c2 = torch.aten.add.Tensor %c, %x, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    %y = torch.aten.mm %c2, %cv : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,5],f32> -> !torch.vtensor<[4,5],f32>
    "tidal.yield"(%c2, %y) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5],f32>) -> ()
  }) {dim = 1 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,6,8],f32>, !torch.vtensor<[8,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,6,5],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,6,5],f32>
}

// Scanned along the last dim ([B, ·, T]): the stacked A moves T to the front, the product back.
// CHECK-LABEL: func.func @dim2
// CHECK:       %[[S:.+]]:2 = "tidal.scan"
// CHECK:       dim = 2 : i64
// CHECK-SAME:  -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8,6],f32>)
// CHECK:       %[[A:.+]] = torch.aten.permute %[[S]]#1, {{.+}} -> !torch.vtensor<[6,4,8],f32>
// CHECK:       %[[F:.+]] = torch.aten.flatten.using_ints %[[A]], {{.+}} -> !torch.vtensor<[24,8],f32>
// CHECK:       %[[P:.+]] = torch.aten.mm %[[F]], %arg2 : {{.+}} -> !torch.vtensor<[24,5],f32>
// CHECK:       %[[V:.+]] = torch.aten.view %[[P]], %{{.+}} -> !torch.vtensor<[6,4,5],f32>
// CHECK:       %[[Y:.+]] = torch.aten.permute %[[V]], {{.+}} -> !torch.vtensor<[4,5,6],f32>
// CHECK:       return %[[S]]#0, %[[Y]]
func.func @dim2(%c0: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[4,8,6],f32>, %v: !torch.vtensor<[8,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5,6],f32>) {
  %r:2 = "tidal.scan"(%c0, %xs, %v) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,8],f32>, %cv: !torch.vtensor<[8,5],f32>):
    %int1 = torch.constant.int 1
    %c2 = torch.aten.add.Tensor %c, %x, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    %y = torch.aten.mm %c2, %cv : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,5],f32> -> !torch.vtensor<[4,5],f32>
    "tidal.yield"(%c2, %y) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5],f32>) -> ()
  }) {dim = 2 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8,6],f32>, !torch.vtensor<[8,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5,6],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5,6],f32>
}

// A dynamic length: the stacked A is as long as the xs, and the product is viewed back with the
// stacked A's own size.
// CHECK-LABEL: func.func @dynamic_length
// CHECK:       %[[S:.+]]:2 = "tidal.scan"
// CHECK:       reverse = false}
// CHECK-SAME:  -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,8],f32>)
// CHECK:       %[[P:.+]] = torch.aten.mm %{{.+}}, %arg2 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,5],f32> -> !torch.vtensor<[?,5],f32>
// CHECK:       %[[T:.+]] = torch.aten.size.int %[[S]]#1, %{{.+}}
// CHECK:       %[[SIZES:.+]] = torch.prim.ListConstruct %[[T]],
// CHECK:       torch.aten.view %[[P]], %[[SIZES]] : {{.+}} -> !torch.vtensor<[?,4,5],f32>
func.func @dynamic_length(%c0: !torch.vtensor<[4,8],f32>, %xs: !torch.vtensor<[?,4,8],f32>, %v: !torch.vtensor<[8,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,5],f32>) {
  %r:2 = "tidal.scan"(%c0, %xs, %v) ({
  ^bb0(%c: !torch.vtensor<[4,8],f32>, %x: !torch.vtensor<[4,8],f32>, %cv: !torch.vtensor<[8,5],f32>):
    %int1 = torch.constant.int 1
    %c2 = torch.aten.add.Tensor %c, %x, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    %y = torch.aten.mm %c2, %cv : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,5],f32> -> !torch.vtensor<[4,5],f32>
    "tidal.yield"(%c2, %y) : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,5],f32>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,8],f32>, !torch.vtensor<[8,5],f32>) -> (!torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,5],f32>)
  return %r#0, %r#1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[?,4,5],f32>
}
