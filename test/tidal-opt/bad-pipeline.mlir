// RUN: not tidal-opt %s --pass-pipeline='builtin.module(tidal-verify, no-such-pass)' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not tidal-opt %s --pass-pipeline='builtin.module(func.func(tidal-verify))' 2>&1 | filecheck %s --check-prefix=NESTED
// RUN: not tidal-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | filecheck %s --check-prefix=UNBALANCED
// UNKNOWN: <pass-pipeline>:1:30: error: 'no-such-pass' is not a tidal pass or pipeline, nor a registered MLIR pass
// NESTED: <pass-pipeline>:1:26: error: tidal pass 'tidal-verify' runs on builtin.module
// UNBALANCED: <pass-pipeline>:1:1: error: missing ')' closing 'builtin.module('

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
