// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-lower-to-scf)' | filecheck %s
// Each tidal op becomes scf: bodies are inlined with their block arguments substituted.

// CHECK-LABEL: func.func @cond
// CHECK: %[[P:.*]] = tensor.extract %arg0[] : tensor<i1>
// CHECK: %[[R:.*]] = scf.if %[[P]] -> (tensor<4xf32>) {
// CHECK:   %[[N:.*]] = arith.negf %arg1 : tensor<4xf32>
// CHECK:   scf.yield %[[N]] : tensor<4xf32>
// CHECK: } else {
// CHECK:   scf.yield %arg1 : tensor<4xf32>
// CHECK: }
// CHECK-NOT: tidal.
// CHECK: return %[[R]]
func.func @cond(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    %n = arith.negf %a : tensor<4xf32>
    "tidal.yield"(%n) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Small carries travel in registers (a scalar, a vector), tensors again inside each region.
// CHECK-LABEL: func.func @while
// CHECK: %[[I0:.*]] = tensor.extract %arg0[] : tensor<i64>
// CHECK: %[[X0:.*]] = vector.transfer_read %arg1
// CHECK: %[[R:.*]]:2 = scf.while (%[[I:.*]] = %[[I0]], %[[X:.*]] = %[[X0]]) : (i64, vector<3xf32>) -> (i64, vector<3xf32>) {
// CHECK:   %[[TI:.*]] = tensor.from_elements %[[I]] : tensor<i64>
// CHECK:   %[[LT:.*]] = "test.less"(%[[TI]], %arg2)
// CHECK:   %[[B:.*]] = tensor.extract %[[LT]][] : tensor<i1>
// CHECK:   scf.condition(%[[B]]) %[[I]], %[[X]] : i64, vector<3xf32>
// CHECK: } do {
// CHECK: ^bb0(%[[BI:.*]]: i64, %[[BX:.*]]: vector<3xf32>):
// CHECK:   %[[TBI:.*]] = tensor.from_elements %[[BI]] : tensor<i64>
// CHECK:   %[[TBX:.*]] = vector.transfer_write %[[BX]]
// CHECK:   %[[INC:.*]] = "test.inc"(%[[TBI]])
// CHECK:   %[[NI:.*]] = tensor.extract %[[INC]][] : tensor<i64>
// CHECK:   %[[NX:.*]] = vector.transfer_read %[[TBX]]
// CHECK:   scf.yield %[[NI]], %[[NX]] : i64, vector<3xf32>
// CHECK: }
// CHECK: tensor.from_elements %[[R]]#0 : tensor<i64>
// CHECK: vector.transfer_write %[[R]]#1
func.func @while(%i: tensor<i64>, %x: tensor<3xf32>, %n: tensor<i64>) -> (tensor<i64>, tensor<3xf32>) {
  %r:2 = "tidal.while"(%i, %x, %n) ({
  ^bb0(%ci: tensor<i64>, %cx: tensor<3xf32>, %cn: tensor<i64>):
    %lt = "test.less"(%ci, %cn) : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "tidal.yield"(%lt) : (tensor<i1>) -> ()
  }, {
  ^bb0(%bi: tensor<i64>, %bx: tensor<3xf32>, %bn: tensor<i64>):
    %inc = "test.inc"(%bi) : (tensor<i64>) -> tensor<i64>
    "tidal.yield"(%inc, %bx) : (tensor<i64>, tensor<3xf32>) -> ()
  }) {num_carries = 2 : i64} : (tensor<i64>, tensor<3xf32>, tensor<i64>) -> (tensor<i64>, tensor<3xf32>)
  return %r#0, %r#1 : tensor<i64>, tensor<3xf32>
}

// -----

// Reverse scan over dim 1: step i reads and writes position T-1-i along dim 1. The carry is also
// the stacked output, so it is not carried: step 0 (position 6) is peeled and reads the initial
// carry, step i >= 1 reads the stack at the previous step's position (T-1-(i-1)), and the final
// carry is the stack's last written slice (position 0).
// CHECK-LABEL: func.func @scan_dim1_reverse
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[T:.*]] = arith.constant 7 : index
// CHECK-DAG: %[[EMPTY:.*]] = tensor.empty() : tensor<2x7xf32>
// CHECK:     %[[X0:.*]] = tensor.extract_slice %arg1[0, %[[P0:.*]]] [2, 1] [1, 1] : tensor<2x7xf32> to tensor<2xf32>
// CHECK:     %[[N0:.*]] = arith.addf %arg0, %[[X0]] : tensor<2xf32>
// CHECK:     %[[YS0:.*]] = tensor.insert_slice %[[N0]] into %[[EMPTY]][0, %[[P0]]] [2, 1] [1, 1]
// CHECK:     %[[R:.*]] = scf.for %[[IV:.*]] = %{{.*}} to %[[T]] step %{{.*}} iter_args(%[[YS:.*]] = %[[YS0]]) -> (tensor<2x7xf32>) {
// CHECK:       %[[POS:.*]] = arith.subi %{{.*}}, %[[IV]] : index
// CHECK:       %[[XT:.*]] = tensor.extract_slice %arg1[0, %[[POS]]] [2, 1] [1, 1] : tensor<2x7xf32> to tensor<2xf32>
// CHECK:       %[[PREV_IV:.*]] = arith.subi %[[IV]], %{{.*}} : index
// CHECK:       %[[PREV:.*]] = arith.subi %{{.*}}, %[[PREV_IV]] : index
// CHECK:       %[[C:.*]] = tensor.extract_slice %[[YS]][0, %[[PREV]]] [2, 1] [1, 1] : tensor<2x7xf32> to tensor<2xf32>
// CHECK:       %[[N:.*]] = arith.addf %[[C]], %[[XT]] : tensor<2xf32>
// CHECK:       %[[INS:.*]] = tensor.insert_slice %[[N]] into %[[YS]][0, %[[POS]]] [2, 1] [1, 1] : tensor<2xf32> into tensor<2x7xf32>
// CHECK:       scf.yield %[[INS]] : tensor<2x7xf32>
// CHECK:     }
// CHECK:     %[[FINAL:.*]] = tensor.extract_slice %[[R]][0, %{{.*}}] [2, 1] [1, 1] : tensor<2x7xf32> to tensor<2xf32>
// CHECK:     return %[[FINAL]], %[[R]]
func.func @scan_dim1_reverse(%h: tensor<2xf32>, %xs: tensor<2x7xf32>) -> (tensor<2xf32>, tensor<2x7xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<2xf32>, %x: tensor<2xf32>):
    %n = arith.addf %c, %x : tensor<2xf32>
    "tidal.yield"(%n, %n) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 1 : i64, reverse = true} : (tensor<2xf32>, tensor<2x7xf32>) -> (tensor<2xf32>, tensor<2x7xf32>)
  return %r#0, %r#1 : tensor<2xf32>, tensor<2x7xf32>
}

// -----

// A carry that is not also stacked stays a loop-carried value; the loop covers every step.
// CHECK-LABEL: func.func @scan_carry_not_stacked
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[T:.*]] = arith.constant 5 : index
// CHECK-DAG: %[[EMPTY:.*]] = tensor.empty() : tensor<5x3xf32>
// CHECK: %[[R:.*]]:2 = scf.for %[[IV:.*]] = %[[C0]] to %[[T]] step %[[C1]] iter_args(%[[C:.*]] = %arg0, %[[YS:.*]] = %[[EMPTY]]) -> (tensor<3xf32>, tensor<5x3xf32>) {
// CHECK:   %[[XT:.*]] = tensor.extract_slice %arg1[%[[IV]], 0] [1, 3] [1, 1] : tensor<5x3xf32> to tensor<3xf32>
// CHECK:   %[[N:.*]] = arith.addf %[[C]], %[[XT]] : tensor<3xf32>
// CHECK:   %[[Y:.*]] = arith.mulf %[[N]], %[[XT]] : tensor<3xf32>
// CHECK:   %[[INS:.*]] = tensor.insert_slice %[[Y]] into %[[YS]][%[[IV]], 0] [1, 3] [1, 1]
// CHECK:   scf.yield %[[N]], %[[INS]] : tensor<3xf32>, tensor<5x3xf32>
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @scan_carry_not_stacked(%h: tensor<3xf32>, %xs: tensor<5x3xf32>) -> (tensor<3xf32>, tensor<5x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    %n = arith.addf %c, %x : tensor<3xf32>
    %y = arith.mulf %n, %x : tensor<3xf32>
    "tidal.yield"(%n, %y) : (tensor<3xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<5x3xf32>) -> (tensor<3xf32>, tensor<5x3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<5x3xf32>
}

// -----

// A dynamic scan length comes from tensor.dim; the stacked output is allocated with it.
// CHECK-LABEL: func.func @scan_dynamic
// CHECK: %[[T:.*]] = tensor.dim %arg1, %{{.*}} : tensor<?x3xf32>
// CHECK: tensor.empty(%[[T]]) : tensor<?x3xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[T]]
func.func @scan_dynamic(%h: tensor<3xf32>, %xs: tensor<?x3xf32>) -> (tensor<3xf32>, tensor<?x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    %n = arith.addf %c, %x : tensor<3xf32>
    "tidal.yield"(%n, %n) : (tensor<3xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<?x3xf32>) -> (tensor<3xf32>, tensor<?x3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<?x3xf32>
}

// -----

// A dynamic batch (Dynamo's): the stacked output's other dynamic dim is computed before the loop
// from the operands: the body's value is a linalg result shaped by tensor.empty(tensor.dim of the
// carry), so the stack's batch dim is tensor.dim of the carry's operand.
// CHECK-LABEL: func.func @scan_dynamic_batch
// CHECK-SAME:  (%[[H:.*]]: tensor<?x3xf32>, %[[XS:.*]]: tensor<?x?x3xf32>)
// CHECK: %[[T:.*]] = tensor.dim %[[XS]], %{{.*}} : tensor<?x?x3xf32>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[B:.*]] = tensor.dim %[[H]], %[[C0]] : tensor<?x3xf32>
// CHECK: tensor.empty(%[[T]], %[[B]]) : tensor<?x?x3xf32>
// CHECK: scf.for
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @scan_dynamic_batch(%h: tensor<?x3xf32>, %xs: tensor<?x?x3xf32>) -> (tensor<?x3xf32>, tensor<?x?x3xf32>) {
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<?x3xf32>, %x: tensor<?x3xf32>):
    %c0 = arith.constant 0 : index
    %b = tensor.dim %c, %c0 : tensor<?x3xf32>
    %e = tensor.empty(%b) : tensor<?x3xf32>
    %n = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c, %x : tensor<?x3xf32>, tensor<?x3xf32>) outs(%e : tensor<?x3xf32>) {
    ^bb0(%u: f32, %v: f32, %o: f32):
      %s = arith.addf %u, %v : f32
      linalg.yield %s : f32
    } -> tensor<?x3xf32>
    "tidal.yield"(%n, %n) : (tensor<?x3xf32>, tensor<?x3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<?x3xf32>, tensor<?x?x3xf32>) -> (tensor<?x3xf32>, tensor<?x?x3xf32>)
  return %r#0, %r#1 : tensor<?x3xf32>, tensor<?x?x3xf32>
}

// -----

// CHECK-LABEL: func.func @map
// CHECK: %[[R:.*]] = scf.for %[[IV:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[OUT:.*]] = %{{.*}}) -> (tensor<5x2xf32>) {
// CHECK:   %[[XT:.*]] = tensor.extract_slice %arg0[%[[IV]], 0] [1, 2] [1, 1] : tensor<5x2xf32> to tensor<2xf32>
// CHECK:   %[[Y:.*]] = arith.mulf %[[XT]], %arg1 : tensor<2xf32>
// CHECK:   tensor.insert_slice %[[Y]] into %[[OUT]][%[[IV]], 0] [1, 2] [1, 1]
func.func @map(%xs: tensor<5x2xf32>, %w: tensor<2xf32>) -> tensor<5x2xf32> {
  %r = "tidal.map"(%xs, %w) ({
  ^bb0(%x: tensor<2xf32>, %cw: tensor<2xf32>):
    %y = arith.mulf %x, %cw : tensor<2xf32>
    "tidal.yield"(%y) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>, tensor<2xf32>) -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}

// -----

// Sequential running combine: slice 0 seeds the result; step t combines the result's slice t-1
// (read back: the loop carries only the results) with x_t and writes slice t.
// CHECK-LABEL: func.func @associative_scan
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[X0:.*]] = tensor.extract_slice %arg0[%[[C0]], 0] [1, 4] [1, 1] : tensor<8x4xf32> to tensor<4xf32>
// CHECK: %[[OUT0:.*]] = tensor.insert_slice %[[X0]] into %{{.*}}[%[[C0]], 0] [1, 4] [1, 1]
// CHECK: %[[R:.*]] = scf.for %[[IV:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[OUT:.*]] = %[[OUT0]])
// CHECK:   %[[PREV:.*]] = arith.subi %[[IV]], %{{.*}} : index
// CHECK:   %[[ACC:.*]] = tensor.extract_slice %[[OUT]][%[[PREV]], 0] [1, 4] [1, 1]
// CHECK:   %[[XT:.*]] = tensor.extract_slice %arg0[%[[IV]], 0] [1, 4] [1, 1]
// CHECK:   %[[S:.*]] = arith.addf %[[ACC]], %[[XT]] : tensor<4xf32>
// CHECK:   %[[NEXT:.*]] = tensor.insert_slice %[[S]] into %[[OUT]][%[[IV]], 0]
// CHECK:   scf.yield %[[NEXT]]
// CHECK: return %[[R]]
func.func @associative_scan(%xs: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = "tidal.associative_scan"(%xs) ({
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %s = arith.addf %a, %b : tensor<4xf32>
    "tidal.yield"(%s) : (tensor<4xf32>) -> ()
  }) {num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}

// -----

// stack_outputs: the loop also carries a growing buffer per carry and the row count; a full buffer
// doubles (copying its rows) before the next row is written; the result is the filled rows, or
// the initial carry as one row when the loop did not run.
// CHECK-LABEL: func.func @while_stacked
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[BUF0:.*]] = tensor.empty(%[[C16]]) : tensor<?x3xf32>
// CHECK: %[[W:.*]]:3 = scf.while (%[[X:.*]] = %arg0, %[[BUF:.*]] = %[[BUF0]], %[[N:.*]] = %{{.*}}) : (tensor<3xf32>, tensor<?x3xf32>, index)
// CHECK: } do {
// CHECK:   %[[NEXT:.*]] = arith.negf
// CHECK:   %[[CAP:.*]] = tensor.dim %{{.*}}, %{{.*}} : tensor<?x3xf32>
// CHECK:   %[[FULL:.*]] = arith.cmpi eq, %{{.*}}, %[[CAP]] : index
// CHECK:   %[[ROOM:.*]] = scf.if %[[FULL]] -> (tensor<?x3xf32>) {
// CHECK:     %[[TWICE:.*]] = arith.muli %[[CAP]], %{{.*}} : index
// CHECK:     %[[BIG:.*]] = tensor.empty(%[[TWICE]]) : tensor<?x3xf32>
// CHECK:     tensor.insert_slice %{{.*}} into %[[BIG]][0, 0] [%[[CAP]], 3] [1, 1]
// CHECK:   tensor.insert_slice %[[NEXT]] into %[[ROOM]][%{{.*}}, 0] [1, 3] [1, 1]
// CHECK:   arith.addi
// CHECK: %[[RAN:.*]] = arith.cmpi ne, %[[W]]#2, %{{.*}} : index
// CHECK: scf.if %[[RAN]] -> (tensor<?x3xf32>) {
// CHECK:   tensor.extract_slice %[[W]]#1[0, 0] [%[[W]]#2, 3] [1, 1]
// CHECK: } else {
// CHECK:   tensor.insert_slice %arg0 into %{{.*}}[%{{.*}}, 0] [1, 3] [1, 1]
func.func @while_stacked(%x: tensor<3xf32>, %p: tensor<i1>) -> tensor<?x3xf32> {
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<3xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<3xf32>, %q: tensor<i1>):
    %n = arith.negf %a : tensor<3xf32>
    "tidal.yield"(%n) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, stack_outputs = true} : (tensor<3xf32>, tensor<i1>) -> tensor<?x3xf32>
  return %r : tensor<?x3xf32>
}

// -----

// A carry of dynamic shape (Dynamo's symbolic sizes) keeps its shape through the loop: the rows'
// dynamic dims are the initial carry's, the doubled buffer's its own.
// CHECK-LABEL: func.func @while_stacked_dynamic
// CHECK: %[[D:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x3xf32>
// CHECK: tensor.empty(%{{.*}}, %[[D]]) : tensor<?x?x3xf32>
// CHECK: scf.while
// CHECK: } do {
// CHECK:   %[[CAP:.*]] = tensor.dim %[[BUF:.*]], %{{.*}} : tensor<?x?x3xf32>
// CHECK:   scf.if
// CHECK:     %[[TWICE:.*]] = arith.muli %[[CAP]], %{{.*}} : index
// CHECK:     %[[ROW:.*]] = tensor.dim %[[BUF]], %{{.*}} : tensor<?x?x3xf32>
// CHECK:     tensor.empty(%[[TWICE]], %[[ROW]]) : tensor<?x?x3xf32>
// CHECK: } else {
// CHECK:   %[[D1:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x3xf32>
// CHECK:   tensor.empty(%{{.*}}, %[[D1]]) : tensor<?x?x3xf32>
func.func @while_stacked_dynamic(%x: tensor<?x3xf32>, %p: tensor<i1>) -> tensor<?x?x3xf32> {
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<?x3xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<?x3xf32>, %q: tensor<i1>):
    %n = arith.negf %a : tensor<?x3xf32>
    "tidal.yield"(%n) : (tensor<?x3xf32>) -> ()
  }) {num_carries = 1 : i64, stack_outputs = true} : (tensor<?x3xf32>, tensor<i1>) -> tensor<?x?x3xf32>
  return %r : tensor<?x?x3xf32>
}

// -----

// Nested ops lower inside out; the result has no tidal ops left.
// CHECK-LABEL: func.func @nested
// CHECK: scf.while
// CHECK: scf.if
// CHECK-NOT: "tidal.
func.func @nested(%x: tensor<3xf32>, %p: tensor<i1>) -> tensor<3xf32> {
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%wx: tensor<3xf32>, %wp: tensor<i1>):
    "tidal.yield"(%wp) : (tensor<i1>) -> ()
  }, {
  ^bb0(%wx: tensor<3xf32>, %wp: tensor<i1>):
    %k = "tidal.cond"(%wp, %wx) ({
    ^bb0(%a: tensor<3xf32>):
      "tidal.yield"(%a) : (tensor<3xf32>) -> ()
    }, {
    ^bb0(%a: tensor<3xf32>):
      %n = arith.negf %a : tensor<3xf32>
      "tidal.yield"(%n) : (tensor<3xf32>) -> ()
    }) : (tensor<i1>, tensor<3xf32>) -> tensor<3xf32>
    "tidal.yield"(%k) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64} : (tensor<3xf32>, tensor<i1>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}
