// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-parallelize-generics)' | filecheck %s
// A large top-level generic runs in chunks of its outer dim on the threads torch allows (one
// chunk per thread; an operand d0 does not index, a broadcast bias, is read whole); with one
// thread allowed it runs as it was.

#rows = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @bias_add
// CHECK: %[[T:.*]] = call @omp_get_max_threads() : () -> i32
// CHECK: %[[TI:.*]] = arith.index_cast %[[T]]
// CHECK: scf.if
// CHECK:   %[[CHUNK:.*]] = arith.ceildivsi %{{.*}}, %[[TI]]
// CHECK:   scf.forall (%[[J:.*]]) in
// CHECK:     %[[START:.*]] = arith.muli %[[J]], %[[CHUNK]]
// CHECK:     %[[X:.*]] = memref.subview %arg0[%[[START]], 0] [%{{.*}}, 512] [1, 1]
// CHECK:     %[[Y:.*]] = memref.subview %arg2[%[[START]], 0] [%{{.*}}, 512] [1, 1]
// CHECK:     linalg.generic {{.*}} ins(%[[X]], %arg1 : {{.*}}) outs(%[[Y]] :
// CHECK: } else {
// CHECK:   linalg.generic {{.*}} ins(%arg0, %arg1 : memref<64x512xf32>, memref<512xf32>) outs(%arg2 : memref<64x512xf32>)
func.func @bias_add(%x: memref<64x512xf32>, %b: memref<512xf32>, %y: memref<64x512xf32>) {
  linalg.generic {indexing_maps = [#rows, #bias, #rows], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : memref<64x512xf32>, memref<512xf32>) outs(%y : memref<64x512xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Small, inside a loop, or d0 in a compound index: left alone.
#id = affine_map<(d0, d1) -> (d0, d1)>
#shifted = affine_map<(d0, d1) -> (d0 + d1, d1)>
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: scf.forall
// CHECK-NOT: omp_get_max_threads
func.func @left_alone(%s: memref<8x8xf32>, %x: memref<64x512xf32>, %y: memref<64x512xf32>, %w: memref<600x512xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : memref<8x8xf32>) outs(%s : memref<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%x : memref<64x512xf32>) outs(%y : memref<64x512xf32>) {
    ^bb0(%a: f32, %o: f32):
      linalg.yield %a : f32
    }
  }
  linalg.generic {indexing_maps = [#shifted, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<600x512xf32>) outs(%y : memref<64x512xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  return
}
