// RUN: not tidal-opt %s --verify-diagnostics 2>&1 | filecheck %s
// --verify-diagnostics fails when the expected text is not what the verifier said, and when an
// expected diagnostic never comes.
// CHECK-DAG: verify-diagnostics-mismatch.mlir:12:8: error: unexpected error: 'tidal.map' op result #0
// CHECK-DAG: verify-diagnostics-mismatch.mlir:11:3: error: expected error "this is not the message" was not produced
// CHECK-DAG: verify-diagnostics-mismatch.mlir:19:3: error: expected error "never emitted" was not produced

func.func @wrong_text(%xs: tensor<5x2xf32>) -> tensor<5x3xf32> {
  // The expected text does not match the message of the error below it.
  // (The next line is the expectation under test.)
  // expected-error@+1 {{this is not the message}}
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    "tidal.yield"(%x) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x3xf32>
  return %r : tensor<5x3xf32>
}

  // expected-error@+1 {{never emitted}}
func.func @fine(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
