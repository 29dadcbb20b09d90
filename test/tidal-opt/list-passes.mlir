// RUN: tidal-opt --list-passes | filecheck %s
// CHECK: tidal passes:
// CHECK: tidal-verify
// CHECK: bundled MLIR / torch-mlir passes
// CHECK: canonicalize
