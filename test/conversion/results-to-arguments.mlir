// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-results-to-arguments)' | filecheck %s
// The function the runtime calls (llvm.emit_c_interface) takes one more argument per result when
// every result has a static shape, and returns nothing: a buffer it allocates and returns becomes
// the caller's buffer (written in place, the alloc gone); an argument, or a buffer returned a
// second time, is copied into it.

// CHECK-LABEL: func.func @main
// CHECK-SAME:    (%[[X:.*]]: memref<4xf32>, %[[Y:.*]]: memref<4xf32>, %[[O0:.*]]: memref<4xf32>, %[[O1:.*]]: memref<4xf32>, %[[O2:.*]]: memref<4xf32>, %[[O3:.*]]: memref<4xf32>)
// CHECK-SAME:    attributes {llvm.emit_c_interface} {
// CHECK-NOT:     memref.alloc
// CHECK:         linalg.generic {{.*}} ins(%[[X]] : memref<4xf32>) outs(%[[O0]] : memref<4xf32>)
// CHECK:         memref.copy %[[Y]], %[[O1]]
// CHECK:         memref.copy %[[O0]], %[[O2]]
// CHECK:         memref.copy %[[X]], %[[O3]]
// CHECK-NEXT:    return{{$}}
func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>) attributes {llvm.emit_c_interface} {
  %a = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : memref<4xf32>) outs(%a : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.addf %in, %in : f32
    linalg.yield %m : f32
  }
  return %a, %y, %a, %x : memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>
}

// A dynamic result keeps the return (the caller cannot size the buffer); so does a function the
// runtime does not call.
// CHECK-LABEL: func.func @dynamic
// CHECK-SAME:    (%{{.*}}: memref<?xf32>) -> memref<?xf32>
// CHECK:         return %{{.*}} : memref<?xf32>
func.func @dynamic(%x: memref<?xf32>) -> memref<?xf32> attributes {llvm.emit_c_interface} {
  return %x : memref<?xf32>
}

// CHECK-LABEL: func.func @helper
// CHECK-SAME:    (%{{.*}}: memref<4xf32>) -> memref<4xf32>
func.func @helper(%x: memref<4xf32>) -> memref<4xf32> {
  return %x : memref<4xf32>
}
