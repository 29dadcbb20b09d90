// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-forward-aliased-results)' | filecheck %s

// The outputs alias the second argument and the first result: those leave the function, the
// runtime hands out what it holds.
// CHECK-LABEL: func.func @forwarded
// CHECK-SAME: -> tensor<4xf32>
// CHECK-SAME: tidal.forwarded_results = ["", "arg 1", "result 0"]
// CHECK: return %{{.*}} : tensor<4xf32>
func.func @forwarded(%x: tensor<4xf32>, %a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    attributes {tidal.output_aliases = ["", "arg 1", "result 0"]} {
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y, %a, %y : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Value semantics cannot tell `x` from `x.clone()`: without the program's word that an output
// aliases, nothing is forwarded (a write to the result would reach the input).
// CHECK-LABEL: func.func @clones
// CHECK-SAME: -> (tensor<4xf32>, tensor<4xf32>)
// CHECK-NOT: tidal.forwarded_results
// CHECK: return %arg0, %arg0
func.func @clones(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {tidal.output_aliases = ["", ""]} {
  return %x, %x : tensor<4xf32>, tensor<4xf32>
}

// -----

// The alias the program names is not the value returned (a view that is not the identity):
// the result is computed.
// CHECK-LABEL: func.func @other_value
// CHECK-SAME: -> tensor<4xf32>
// CHECK-NOT: tidal.forwarded_results
func.func @other_value(%x: tensor<4xf32>) -> tensor<4xf32> attributes {tidal.output_aliases = ["arg 0"]} {
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// No word from the program at all: nothing changes.
// CHECK-LABEL: func.func @unmarked
// CHECK-SAME: -> (tensor<4xf32>, tensor<4xf32>)
func.func @unmarked(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  return %x, %x : tensor<4xf32>, tensor<4xf32>
}
