// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-cond-to-select)' | filecheck %s
// GPU: a cond whose branches are elementwise becomes both branches and a select on the 0-d
// predicate (no host read of the predicate); a branch with a reduction keeps the control flow.

#id = affine_map<(d0) -> (d0)>
#to_scalar = affine_map<(d0) -> ()>

// CHECK-LABEL: func.func @elementwise_branches
// CHECK-SAME:  (%[[P:[a-z0-9]+]]: tensor<i1>, %[[X:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-NOT:   tidal.cond
// CHECK:       %[[DOUBLED:.+]] = linalg.generic
// CHECK:         arith.addf
// CHECK:       %[[SEL:.+]] = linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}, #{{.+}}, #{{.+}}], iterator_types = ["parallel"]} ins(%[[P]], %[[DOUBLED]], %[[X]] : tensor<i1>, tensor<8xf32>, tensor<8xf32>)
// CHECK:         arith.select
// CHECK:       return %[[SEL]]
func.func @elementwise_branches(%p: tensor<i1>, %x: tensor<8xf32>) -> tensor<8xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<8xf32>):
    %e = tensor.empty() : tensor<8xf32>
    %d = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
    ^bb0(%v: f32, %o: f32):
      %s = arith.addf %v, %v : f32
      linalg.yield %s : f32
    } -> tensor<8xf32>
    "tidal.yield"(%d) : (tensor<8xf32>) -> ()
  }, {
  ^bb0(%a: tensor<8xf32>):
    "tidal.yield"(%a) : (tensor<8xf32>) -> ()
  }) : (tensor<i1>, tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// A dynamic size (Dynamo's): the branches read it with tensor.dim; the select's result takes the
// dynamic dim from the first branch's value.
// CHECK-LABEL: func.func @dynamic_elementwise_branches
// CHECK-SAME:  (%[[P:[a-z0-9]+]]: tensor<i1>, %[[X:[a-z0-9]+]]: tensor<?xf32>)
// CHECK-NOT:   tidal.cond
// CHECK:       %[[DOUBLED:.+]] = linalg.generic
// CHECK:       %[[C0:.+]] = arith.constant 0 : index
// CHECK:       %[[N:.+]] = tensor.dim %[[DOUBLED]], %[[C0]]
// CHECK:       %[[E:.+]] = tensor.empty(%[[N]]) : tensor<?xf32>
// CHECK:       %[[SEL:.+]] = linalg.generic {{.*}} ins(%[[P]], %[[DOUBLED]], %[[X]] : tensor<i1>, tensor<?xf32>, tensor<?xf32>) outs(%[[E]] : tensor<?xf32>)
// CHECK:         arith.select
// CHECK:       return %[[SEL]]
func.func @dynamic_elementwise_branches(%p: tensor<i1>, %x: tensor<?xf32>) -> tensor<?xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<?xf32>):
    %c0 = arith.constant 0 : index
    %n = tensor.dim %a, %c0 : tensor<?xf32>
    %e = tensor.empty(%n) : tensor<?xf32>
    %d = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
    ^bb0(%v: f32, %o: f32):
      %s = arith.addf %v, %v : f32
      linalg.yield %s : f32
    } -> tensor<?xf32>
    "tidal.yield"(%d) : (tensor<?xf32>) -> ()
  }, {
  ^bb0(%a: tensor<?xf32>):
    "tidal.yield"(%a) : (tensor<?xf32>) -> ()
  }) : (tensor<i1>, tensor<?xf32>) -> tensor<?xf32>
  return %r : tensor<?xf32>
}

// CHECK-LABEL: func.func @reduction_branch
// CHECK:       "tidal.cond"
func.func @reduction_branch(%p: tensor<i1>, %x: tensor<8xf32>) -> tensor<f32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<8xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<f32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
    %s = linalg.generic {indexing_maps = [#id, #to_scalar], iterator_types = ["reduction"]} ins(%a : tensor<8xf32>) outs(%z : tensor<f32>) {
    ^bb0(%v: f32, %acc: f32):
      %n = arith.addf %v, %acc : f32
      linalg.yield %n : f32
    } -> tensor<f32>
    "tidal.yield"(%s) : (tensor<f32>) -> ()
  }, {
  ^bb0(%a: tensor<8xf32>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<f32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
    "tidal.yield"(%z) : (tensor<f32>) -> ()
  }) : (tensor<i1>, tensor<8xf32>) -> tensor<f32>
  return %r : tensor<f32>
}
