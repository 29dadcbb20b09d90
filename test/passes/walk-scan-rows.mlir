// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-walk-scan-rows)' | filecheck %s
// A linear recurrence along T of [4, T, 256] after bufferization: each step is one elementwise
// generic over [4, 256] slices whose rows lie T·256 apart. Each row walks every step before the
// next row: a loop over the rows around the steps' loop, each step a [1, 256] generic.

#map = affine_map<(d0, d1) -> (d0, d1)>
#bcast = affine_map<(d0, d1) -> (d1)>

// CHECK-LABEL: func.func @along_t
// CHECK:       scf.for %[[B:.+]] = %{{.+}} to %{{.+}} step
// CHECK-NEXT:    scf.for %[[T:.+]] = %c1 to %c4096 step %c1 {
// CHECK:           memref.subview %{{.+}}[%[[B]], 0] [1, 256] [1, 1]
// CHECK:           linalg.generic {{.*}} ins(%{{.+}}, %{{.+}}, %arg1 : memref<1x256xf32, {{.*}}>, memref<1x256xf32, {{.*}}>, memref<256xf32>) outs(%{{.+}} : memref<1x256xf32,
func.func @along_t(%arg0: memref<4x4096x256xf32>, %arg1: memref<256xf32>) -> memref<4x4096x256xf32> {
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x4096x256xf32>
  scf.for %t = %c1 to %c4096 step %c1 {
    %p = arith.subi %t, %c1 : index
    %prev = memref.subview %alloc[0, %p, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    %x = memref.subview %arg0[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    %dst = memref.subview %alloc[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map, #bcast, #map], iterator_types = ["parallel", "parallel"]} ins(%prev, %x, %arg1 : memref<4x256xf32, strided<[1048576, 1], offset: ?>>, memref<4x256xf32, strided<[1048576, 1], offset: ?>>, memref<256xf32>) outs(%dst : memref<4x256xf32, strided<[1048576, 1], offset: ?>>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %m = arith.mulf %a, %c : f32
      %s = arith.addf %m, %b : f32
      linalg.yield %s : f32
    }
  }
  return %alloc : memref<4x4096x256xf32>
}

// Along the leading dim the [4, 256] slices are contiguous: left as it is.
// CHECK-LABEL: func.func @along_leading_dim
// CHECK:       scf.for
// CHECK-NOT:   scf.for
// CHECK:       linalg.generic {{.*}} memref<4x256xf32
func.func @along_leading_dim(%arg0: memref<4096x4x256xf32>) -> memref<4096x4x256xf32> {
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4096x4x256xf32>
  scf.for %t = %c1 to %c4096 step %c1 {
    %p = arith.subi %t, %c1 : index
    %prev = memref.subview %alloc[%p, 0, 0] [1, 4, 256] [1, 1, 1] : memref<4096x4x256xf32> to memref<4x256xf32, strided<[256, 1], offset: ?>>
    %x = memref.subview %arg0[%t, 0, 0] [1, 4, 256] [1, 1, 1] : memref<4096x4x256xf32> to memref<4x256xf32, strided<[256, 1], offset: ?>>
    %dst = memref.subview %alloc[%t, 0, 0] [1, 4, 256] [1, 1, 1] : memref<4096x4x256xf32> to memref<4x256xf32, strided<[256, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%prev, %x : memref<4x256xf32, strided<[256, 1], offset: ?>>, memref<4x256xf32, strided<[256, 1], offset: ?>>) outs(%dst : memref<4x256xf32, strided<[256, 1], offset: ?>>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    }
  }
  return %alloc : memref<4096x4x256xf32>
}

// The rows a step reads move with the step (a window sliding down the rows): rows of different
// steps meet, so the order of the loops matters: left as it is.
// CHECK-LABEL: func.func @sliding_rows
// CHECK:       scf.for
// CHECK-NOT:   scf.for
// CHECK:       linalg.generic {{.*}} memref<4x256xf32
func.func @sliding_rows(%arg0: memref<4x4096x256xf32>) -> memref<4100x4096x256xf32> {
  %c1 = arith.constant 1 : index
  %c4096 = arith.constant 4096 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4100x4096x256xf32>
  scf.for %t = %c1 to %c4096 step %c1 {
    %p = arith.subi %t, %c1 : index
    %prev = memref.subview %alloc[%p, %p, 0] [4, 1, 256] [1, 1, 1] : memref<4100x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    %x = memref.subview %arg0[0, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    %dst = memref.subview %alloc[%t, %t, 0] [4, 1, 256] [1, 1, 1] : memref<4100x4096x256xf32> to memref<4x256xf32, strided<[1048576, 1], offset: ?>>
    linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%prev, %x : memref<4x256xf32, strided<[1048576, 1], offset: ?>>, memref<4x256xf32, strided<[1048576, 1], offset: ?>>) outs(%dst : memref<4x256xf32, strided<[1048576, 1], offset: ?>>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    }
  }
  return %alloc : memref<4100x4096x256xf32>
}
