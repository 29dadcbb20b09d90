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
// CHECK: return
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

// -----

// Consecutive generics over the same rows run as ONE group: a thread runs its rows of every
// member in order (one team start for a softmax's five ops). The accumulator's fill joins; the
// allocation and the view between members move before the group, the deallocation after it.
// The members are each under MIN_ELEMENTS; together they are over it.
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#red = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @softmax_like
// CHECK: %[[ACC:.*]] = memref.alloc(){{.*}}: memref<8x32xf32>
// CHECK: %[[VIEW:.*]] = memref.expand_shape %[[ACC]]
// CHECK: call @omp_get_max_threads
// CHECK: scf.if
// CHECK:   scf.forall
// CHECK:     linalg.generic {{.*}} ins(%{{.*}} : memref<?x32x32xf32, {{.*}}>) outs(%{{.*}} : memref<?x32x32xf32, {{.*}}>)
// CHECK:     linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<?x32x1xf32, {{.*}}>)
// CHECK:     linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK:     linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : memref<?x32x32xf32, {{.*}}>, memref<?x32x1xf32, {{.*}}>)
// CHECK-NOT: scf.forall
// CHECK: } else {
// CHECK:   linalg.generic {{.*}} ins(%arg0 : memref<8x32x32xf32>) outs(%arg1 : memref<8x32x32xf32>)
// CHECK:   linalg.fill ins(%{{.*}} : f32) outs(%[[VIEW]] : memref<8x32x1xf32>)
// CHECK:   linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK:   linalg.generic {{.*}} ins(%arg1, %[[VIEW]] : memref<8x32x32xf32>, memref<8x32x1xf32>)
// CHECK-NOT: scf.forall
// CHECK: memref.dealloc %[[ACC]]
// CHECK-NEXT: return
func.func @softmax_like(%x: memref<8x32x32xf32>, %y: memref<8x32x32xf32>) {
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<8x32x32xf32>) outs(%y : memref<8x32x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  }
  %acc = memref.alloc() : memref<8x32xf32>
  %view = memref.expand_shape %acc [[0], [1, 2]] output_shape [8, 32, 1] : memref<8x32xf32> into memref<8x32x1xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%view : memref<8x32x1xf32>)
  linalg.generic {indexing_maps = [#id3, #row3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%y : memref<8x32x32xf32>) outs(%view : memref<8x32x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id3, #row3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y, %view : memref<8x32x32xf32>, memref<8x32x1xf32>) outs(%y : memref<8x32x32xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %d = arith.divf %a, %s : f32
    linalg.yield %d : f32
  }
  memref.dealloc %acc : memref<8x32xf32>
  return
}

// -----

// A member reading whole a buffer that an earlier member writes in chunks would read rows
// another thread writes: the group ends there and the reader starts its own.
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#flip = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @cross_rows
// CHECK: scf.forall
// CHECK: } else {
// CHECK: scf.forall
// CHECK: } else {
func.func @cross_rows(%x: memref<128x128xf32>, %t: memref<128x128xf32>, %y: memref<128x128xf32>) {
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<128x128xf32>) outs(%t : memref<128x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  }
  linalg.generic {indexing_maps = [#flip, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<128x128xf32>) outs(%y : memref<128x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  return
}

// -----

// A subview may overlap a buffer it does not name: a member reading one after another member
// wrote (anything) ends the group.
#idv = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @subview_alias
// CHECK: scf.forall
// CHECK: } else {
// CHECK: scf.forall
// CHECK: } else {
func.func @subview_alias(%x: memref<128x256xf32>, %y: memref<128x128xf32>) {
  %half = memref.subview %x[0, 128] [128, 128] [1, 1] : memref<128x256xf32> to memref<128x128xf32, strided<[256, 1], offset: 128>>
  linalg.generic {indexing_maps = [#idv, #idv], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<128x256xf32>) outs(%x : memref<128x256xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  }
  linalg.generic {indexing_maps = [#idv, #idv], iterator_types = ["parallel", "parallel"]}
      ins(%half : memref<128x128xf32, strided<[256, 1], offset: 128>>) outs(%y : memref<128x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  return
}
