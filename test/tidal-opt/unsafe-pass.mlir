// RUN: not tidal-opt %s --pass-pipeline='builtin.module(inline)' 2>&1 | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-lower-to-scf, inline)' | filecheck %s --check-prefix=LOWERED
// MLIR's inliner segfaults on one-region unregistered ops (it takes them for symbol tables), so
// tidal-opt refuses it while tidal ops remain, instead of crashing; after lowering it runs.
// CHECK: <pass-pipeline>:1:16: error: pass 'inline' cannot run while tidal ops remain
// LOWERED: scf.for
func.func @f(%xs: tensor<5x2xf32>) -> tensor<5x2xf32> {
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    "tidal.yield"(%x) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}
