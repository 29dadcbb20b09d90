// RUN: tidal-opt %s --split-input-file | tidal-opt --split-input-file | filecheck %s
// Every tidal op survives print -> parse -> print unchanged, with builtin and torch types, static
// and dynamic dims, several carries/outputs, and nesting.

// CHECK-LABEL: func.func @cond_static
// CHECK: %[[R:.*]]:2 = "tidal.cond"(%arg0, %arg1, %arg2) ({
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<f64>):
// CHECK-NEXT: "tidal.yield"(%[[A]], %[[B]]) : (tensor<4xf32>, tensor<f64>) -> ()
// CHECK: }, {
// CHECK: "tidal.yield"
// CHECK: }) : (tensor<i1>, tensor<4xf32>, tensor<f64>) -> (tensor<4xf32>, tensor<f64>)
func.func @cond_static(%p: tensor<i1>, %x: tensor<4xf32>, %y: tensor<f64>) -> (tensor<4xf32>, tensor<f64>) {
  %r:2 = "tidal.cond"(%p, %x, %y) ({
  ^bb0(%a: tensor<4xf32>, %b: tensor<f64>):
    "tidal.yield"(%a, %b) : (tensor<4xf32>, tensor<f64>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %b: tensor<f64>):
    %n = arith.negf %a : tensor<4xf32>
    "tidal.yield"(%n, %b) : (tensor<4xf32>, tensor<f64>) -> ()
  }) : (tensor<i1>, tensor<4xf32>, tensor<f64>) -> (tensor<4xf32>, tensor<f64>)
  return %r#0, %r#1 : tensor<4xf32>, tensor<f64>
}

// -----

// CHECK-LABEL: func.func @cond_torch_dynamic
// CHECK: "tidal.cond"(%arg0, %arg1) ({
// CHECK: ^bb0(%{{.*}}: !torch.vtensor<[?,3],f32>):
// CHECK: }) : (!torch.vtensor<[],i1>, !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[?,3],f32>
func.func @cond_torch_dynamic(%p: !torch.vtensor<[],i1>, %x: !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[?,3],f32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: !torch.vtensor<[?,3],f32>):
    "tidal.yield"(%a) : (!torch.vtensor<[?,3],f32>) -> ()
  }, {
  ^bb0(%a: !torch.vtensor<[?,3],f32>):
    "tidal.yield"(%a) : (!torch.vtensor<[?,3],f32>) -> ()
  }) : (!torch.vtensor<[],i1>, !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[?,3],f32>
  return %r : !torch.vtensor<[?,3],f32>
}

// -----

// CHECK-LABEL: func.func @while_two_carries_and_const
// CHECK: %{{.*}}:2 = "tidal.while"(%arg0, %arg1, %arg2) ({
// CHECK: ^bb0(%{{.*}}: tensor<i64>, %{{.*}}: tensor<?xf32>, %{{.*}}: tensor<i64>):
// CHECK: "tidal.yield"(%{{.*}}) : (tensor<i1>) -> ()
// CHECK: }, {
// CHECK: "tidal.yield"(%{{.*}}, %{{.*}}) : (tensor<i64>, tensor<?xf32>) -> ()
// CHECK: }) {num_carries = 2 : i64} : (tensor<i64>, tensor<?xf32>, tensor<i64>) -> (tensor<i64>, tensor<?xf32>)
func.func @while_two_carries_and_const(%i: tensor<i64>, %x: tensor<?xf32>, %n: tensor<i64>) -> (tensor<i64>, tensor<?xf32>) {
  %r:2 = "tidal.while"(%i, %x, %n) ({
  ^bb0(%ci: tensor<i64>, %cx: tensor<?xf32>, %cn: tensor<i64>):
    %lt = "test.less"(%ci, %cn) : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "tidal.yield"(%lt) : (tensor<i1>) -> ()
  }, {
  ^bb0(%bi: tensor<i64>, %bx: tensor<?xf32>, %bn: tensor<i64>):
    "tidal.yield"(%bi, %bx) : (tensor<i64>, tensor<?xf32>) -> ()
  }) {num_carries = 2 : i64} : (tensor<i64>, tensor<?xf32>, tensor<i64>) -> (tensor<i64>, tensor<?xf32>)
  return %r#0, %r#1 : tensor<i64>, tensor<?xf32>
}

// -----

// CHECK-LABEL: func.func @scan_dim1_reverse
// CHECK: "tidal.scan"(%arg0, %arg1, %arg2, %arg3) ({
// CHECK: ^bb0(%{{.*}}: tensor<2xf32>, %{{.*}}: tensor<2xf32>, %{{.*}}: tensor<2x5xf32>, %{{.*}}: tensor<2xf32>):
// CHECK: }) {dim = 1 : i64, num_carries = 1 : i64, num_xs = 2 : i64, reverse = true}
// CHECK-SAME: -> (tensor<2xf32>, tensor<2x7xf32>, tensor<2x7x5xf32>)
func.func @scan_dim1_reverse(%h: tensor<2xf32>, %xs: tensor<2x7xf32>, %zs: tensor<2x7x5xf32>, %w: tensor<2xf32>) -> (tensor<2xf32>, tensor<2x7xf32>, tensor<2x7x5xf32>) {
  %r:3 = "tidal.scan"(%h, %xs, %zs, %w) ({
  ^bb0(%c: tensor<2xf32>, %x: tensor<2xf32>, %z: tensor<2x5xf32>, %cw: tensor<2xf32>):
    %n = arith.addf %c, %x : tensor<2xf32>
    "tidal.yield"(%n, %n, %z) : (tensor<2xf32>, tensor<2xf32>, tensor<2x5xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 2 : i64, dim = 1 : i64, reverse = true} : (tensor<2xf32>, tensor<2x7xf32>, tensor<2x7x5xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2x7xf32>, tensor<2x7x5xf32>)
  return %r#0, %r#1, %r#2 : tensor<2xf32>, tensor<2x7xf32>, tensor<2x7x5xf32>
}

// -----

// CHECK-LABEL: func.func @scan_dynamic_length
// CHECK: "tidal.scan"
// CHECK: }) {{.*}} : (tensor<3xf32>, tensor<?x3xf32>) -> (tensor<3xf32>, tensor<?x3xf32>)
func.func @scan_dynamic_length(%h: tensor<3xf32>, %xs: tensor<?x3xf32>) -> (tensor<3xf32>, tensor<?x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    %n = arith.addf %c, %x : tensor<3xf32>
    "tidal.yield"(%n, %n) : (tensor<3xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<?x3xf32>) -> (tensor<3xf32>, tensor<?x3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<?x3xf32>
}

// -----

// CHECK-LABEL: func.func @associative_scan_pair
// CHECK: "tidal.associative_scan"(%arg0, %arg1) ({
// CHECK: ^bb0(%{{.*}}: tensor<16xf32>, %{{.*}}: tensor<16xf32>, %{{.*}}: tensor<16xf32>, %{{.*}}: tensor<16xf32>):
// CHECK: }) {dim = 0 : i64, num_xs = 2 : i64, reverse = false}
func.func @associative_scan_pair(%a: tensor<128x16xf32>, %b: tensor<128x16xf32>) -> (tensor<128x16xf32>, tensor<128x16xf32>) {
  %r:2 = "tidal.associative_scan"(%a, %b) ({
  ^bb0(%a1: tensor<16xf32>, %b1: tensor<16xf32>, %a2: tensor<16xf32>, %b2: tensor<16xf32>):
    %aa = arith.mulf %a1, %a2 : tensor<16xf32>
    %ab = arith.mulf %a2, %b1 : tensor<16xf32>
    %bb = arith.addf %ab, %b2 : tensor<16xf32>
    "tidal.yield"(%aa, %bb) : (tensor<16xf32>, tensor<16xf32>) -> ()
  }) {num_xs = 2 : i64, dim = 0 : i64, reverse = false} : (tensor<128x16xf32>, tensor<128x16xf32>) -> (tensor<128x16xf32>, tensor<128x16xf32>)
  return %r#0, %r#1 : tensor<128x16xf32>, tensor<128x16xf32>
}

// -----

// CHECK-LABEL: func.func @map_with_const
// CHECK: "tidal.map"(%arg0, %arg1) ({
// CHECK: ^bb0(%{{.*}}: tensor<?xf32>, %{{.*}}: tensor<f32>):
// CHECK: }) {num_xs = 1 : i64} : (tensor<5x?xf32>, tensor<f32>) -> tensor<5x?xf32>
func.func @map_with_const(%xs: tensor<5x?xf32>, %s: tensor<f32>) -> tensor<5x?xf32> {
  %r = "tidal.map"(%xs, %s) ({
  ^bb0(%x: tensor<?xf32>, %cs: tensor<f32>):
    "tidal.yield"(%x) : (tensor<?xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x?xf32>, tensor<f32>) -> tensor<5x?xf32>
  return %r : tensor<5x?xf32>
}

// -----

// A cond inside a scan inside a while: nested regions pass their values down as operands.
// CHECK-LABEL: func.func @nested
// CHECK: "tidal.while"
// CHECK: "tidal.scan"
// CHECK: "tidal.cond"
// CHECK: "tidal.yield"
func.func @nested(%x: tensor<3xf32>, %xs: tensor<4x3xf32>, %p: tensor<i1>) -> tensor<3xf32> {
  %r = "tidal.while"(%x, %xs, %p) ({
  ^bb0(%wx: tensor<3xf32>, %wxs: tensor<4x3xf32>, %wp: tensor<i1>):
    "tidal.yield"(%wp) : (tensor<i1>) -> ()
  }, {
  ^bb0(%wx: tensor<3xf32>, %wxs: tensor<4x3xf32>, %wp: tensor<i1>):
    %s:2 = "tidal.scan"(%wx, %wxs, %wp) ({
    ^bb0(%c: tensor<3xf32>, %xt: tensor<3xf32>, %sp: tensor<i1>):
      %k = "tidal.cond"(%sp, %c, %xt) ({
      ^bb0(%a: tensor<3xf32>, %b: tensor<3xf32>):
        %ab = arith.addf %a, %b : tensor<3xf32>
        "tidal.yield"(%ab) : (tensor<3xf32>) -> ()
      }, {
      ^bb0(%a: tensor<3xf32>, %b: tensor<3xf32>):
        "tidal.yield"(%a) : (tensor<3xf32>) -> ()
      }) : (tensor<i1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      "tidal.yield"(%k, %k) : (tensor<3xf32>, tensor<3xf32>) -> ()
    }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>, tensor<i1>) -> (tensor<3xf32>, tensor<4x3xf32>)
    "tidal.yield"(%s#0) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64} : (tensor<3xf32>, tensor<4x3xf32>, tensor<i1>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}
