// RUN: not tidal-opt %s 2>&1 | filecheck %s
// A file with nothing but comments is an error, not an empty module.
// CHECK: empty.mlir:1:1: error: input is empty: expected an MLIR module
