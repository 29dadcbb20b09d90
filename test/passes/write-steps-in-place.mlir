// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-write-steps-in-place)' | filecheck %s
// A scan's step after One-Shot Bufferize: it reads out[t-1] and writes a temporary that is then
// copied to out[t]. The slices are disjoint (offsets t-1 and t, one row each), so the step writes
// out[t] itself; an input that may overlap the destination, an output read as an input, or an op
// between the step and the copy keeps the temporary.

#map = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-LABEL: func.func @recurrence
// CHECK:       scf.for %[[T:.+]] = 
// CHECK-NOT:   memref.alloc
// CHECK:       %[[DST:.+]] = memref.subview %alloc[0, %[[T]], 0]
// CHECK:       linalg.generic
// CHECK-SAME:  outs(%[[DST]] :
// CHECK-NOT:   memref.copy
// CHECK:       return
func.func @recurrence(%arg0: memref<4x4096x256xf32>) -> memref<4x4096x256xf32> {
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x4096x256xf32>
  scf.for %t = %c1 to %c4096 step %c1 {
    %tmp = memref.alloc() {alignment = 64 : i64} : memref<4x256xf32>
    %p = arith.subi %t, %c1 : index
    %prev = memref.subview %alloc[0, %p, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    %x = memref.subview %arg0[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%prev, %x : memref<4x256xf32, strided<[1048576, 1], offset: ?>>, memref<4x256xf32, strided<[1048576, 1], offset: ?>>) outs(%tmp : memref<4x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    }
    %dst = memref.subview %alloc[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    memref.copy %tmp, %dst : memref<4x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
  }
  return %alloc : memref<4x4096x256xf32>
}

// The step reads the slice it writes (offsets equal): the copy stays.
// CHECK-LABEL: func.func @overlapping_input
// CHECK:       memref.alloc() {{.*}} : memref<4x256xf32>
// CHECK:       memref.copy
func.func @overlapping_input(%arg0: memref<4x4096x256xf32>) -> memref<4x4096x256xf32> {
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x4096x256xf32>
  scf.for %t = %c1 to %c4096 step %c1 {
    %tmp = memref.alloc() {alignment = 64 : i64} : memref<4x256xf32>
    %same = memref.subview %alloc[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    %x = memref.subview %arg0[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%same, %x : memref<4x256xf32, strided<[1048576, 1], offset: ?>>, memref<4x256xf32, strided<[1048576, 1], offset: ?>>) outs(%tmp : memref<4x256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    }
    %dst = memref.subview %alloc[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    memref.copy %tmp, %dst : memref<4x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
  }
  return %alloc : memref<4x4096x256xf32>
}

// The destination is a slice of an argument that an input also reads (arguments may alias).
// CHECK-LABEL: func.func @argument_destination
// CHECK:       memref.copy
func.func @argument_destination(%arg0: memref<4x256xf32>, %arg1: memref<8x256xf32>) {
  %tmp = memref.alloc() {alignment = 64 : i64} : memref<4x256xf32>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<4x256xf32>) outs(%tmp : memref<4x256xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  }
  %dst = memref.subview %arg1[4, 0] [4, 256] [1, 1] : memref<8x256xf32> to memref<4x256xf32, strided<[256, 1], offset: 1024>>
  memref.copy %tmp, %dst : memref<4x256xf32> to memref<4x256xf32, strided<[256, 1], offset: 1024>>
  return
}

// The step reads its output's initial value, which the temporary's allocation leaves undefined
// and the destination would not: left alone.
// CHECK-LABEL: func.func @reads_its_output
// CHECK:       memref.copy
func.func @reads_its_output(%arg0: memref<4x256xf32>) -> memref<8x256xf32> {
  %alloc = memref.alloc() : memref<8x256xf32>
  %tmp = memref.alloc() {alignment = 64 : i64} : memref<4x256xf32>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<4x256xf32>) outs(%tmp : memref<4x256xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  }
  %dst = memref.subview %alloc[4, 0] [4, 256] [1, 1] : memref<8x256xf32> to memref<4x256xf32, strided<[256, 1], offset: 1024>>
  memref.copy %tmp, %dst : memref<4x256xf32> to memref<4x256xf32, strided<[256, 1], offset: 1024>>
  return %alloc : memref<8x256xf32>
}
