// --help exits 0 (lit fails a RUN line that exits non-zero), as mlir-opt's does.
// RUN: tidal-opt --help | filecheck %s
// CHECK: usage: tidal-opt
// CHECK: --pass-pipeline
// CHECK: --describe-op NAME
