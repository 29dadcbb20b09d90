// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-split-large-functions{ops-per-function=4 min-ops=8})' | filecheck %s
// RUN: not tidal-opt %s --pass-pipeline='builtin.module(tidal-split-large-functions{ops-per-function=0})' 2>&1 | filecheck %s --check-prefix=BAD
// BAD: error: ops-per-function must be a positive integer, got '0'
// A body of at least `min-ops` ops (nested ones counted) is cut into pieces of `ops-per-function` that
// become noinline private functions of one !llvm.ptr: the values crossing a cut travel through a
// struct on the caller's stack (memrefs as descriptors, index as i64, floats as they are).
// Constants are cloned into the pieces that use them; stack slots stay in the caller.

// CHECK-LABEL: func.func @steps
// CHECK-SAME:    (%[[X:.*]]: memref<4xf32>, %[[N:.*]]: index) -> memref<4xf32>
// CHECK-NOT:     arith.constant
// CHECK:         %[[F0:.*]] = llvm.alloca %{{.*}} x !llvm.struct<(struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>, struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>)>
// CHECK:         %[[STACK:.*]] = memref.alloca() : memref<f32>
// CHECK:         %[[D:.*]] = builtin.unrealized_conversion_cast %[[X]] : memref<4xf32> to !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK:         %[[P:.*]] = llvm.getelementptr %[[F0]][0, 0]
// CHECK:         llvm.store %[[D]], %[[P]]
// CHECK:         call @steps__part0(%[[F0]]) : (!llvm.ptr) -> ()
// CHECK:         %[[Q:.*]] = llvm.getelementptr %[[F0]][0, 1]
// CHECK:         %[[A:.*]] = llvm.load %[[Q]]
// CHECK:         %[[AM:.*]] = builtin.unrealized_conversion_cast %[[A]] {{.*}} to memref<4xf32>
// CHECK:         %[[I:.*]] = arith.index_cast %[[N]] : index to i64
// CHECK:         llvm.store %[[I]]
// CHECK:         call @steps__part1(
// CHECK:         %[[B:.*]] = builtin.unrealized_conversion_cast %{{.*}} to memref<4xf32>
// CHECK:         builtin.unrealized_conversion_cast %[[STACK]] : memref<f32> to !llvm.struct<(ptr, ptr, i64)>
// CHECK:         call @steps__part2(
// CHECK:         return %[[B]] : memref<4xf32>

func.func @steps(%x: memref<4xf32>, %n: index) -> memref<4xf32> {
  %c2 = arith.constant 2.0 : f32
  %s = memref.alloca() : memref<f32>
  %a = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : memref<4xf32>) outs(%a : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %c2 : f32
    linalg.yield %m : f32
  }
  %v = memref.load %x[%n] : memref<4xf32>
  %b = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.addf %in, %v : f32
    linalg.yield %m : f32
  }
  memref.store %v, %s[] : memref<f32>
  memref.dealloc %a : memref<4xf32>
  return %b : memref<4xf32>
}

// A body below `min-ops` stays whole.
func.func @small(%x: memref<4xf32>) -> memref<4xf32> {
  return %x : memref<4xf32>
}

// CHECK-LABEL: func.func @small
// CHECK-NOT:     call
// CHECK:         return

// CHECK-LABEL: func.func private @steps__part0
// CHECK-SAME:    (%[[F:.*]]: !llvm.ptr) attributes {llvm.no_inline}
// CHECK:         %[[C:.*]] = arith.constant 2.000000e+00 : f32
// CHECK:         llvm.load
// CHECK:         %[[R:.*]] = memref.alloc() : memref<4xf32>
// CHECK:         arith.mulf %{{.*}}, %[[C]]
// CHECK:         %[[RD:.*]] = builtin.unrealized_conversion_cast %[[R]]
// CHECK:         llvm.store %[[RD]]
// CHECK-NEXT:    return
// CHECK-LABEL: func.func private @steps__part1
// CHECK:         %[[V:.*]] = memref.load
// CHECK:         arith.addf %{{.*}}, %[[V]]
// CHECK:         llvm.store %[[V]]
// CHECK-LABEL: func.func private @steps__part2
// CHECK:         memref.store %{{.*}}, %{{.*}}[] : memref<f32>
// CHECK:         memref.dealloc
// CHECK-NEXT:    return
