// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-read-only-arguments)' | filecheck %s
// The caller's tensors are never a destination: every argument is marked not writable (keeping the
// attributes it had), so that bufferization copies an argument before an op writes into it.

// CHECK-LABEL: func.func @acc
// CHECK-SAME:  (%arg0: tensor<4x5xf32> {bufferization.writable = false}, %arg1: tensor<4x3xf32> {bufferization.writable = false, tidal.note = 1 : i64})
func.func @acc(%b: tensor<4x5xf32>, %x: tensor<4x3xf32> {tidal.note = 1 : i64}) -> tensor<4x5xf32> {
  return %b : tensor<4x5xf32>
}
