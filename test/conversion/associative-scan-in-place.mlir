// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-lower-to-scf, func.func(linalg-fuse-elementwise-ops), one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}, func.func(buffer-hoisting, buffer-loop-hoisting))' | filecheck %s
// The CPU loop of an associative_scan reads the previous prefix in place from the result and
// allocates nothing per step: the combine's temporaries are hoisted out of the loop. A result
// nothing uses, whose prefix no used result reads, is not computed at all.

#map = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @linear_recurrence
// CHECK: %[[TMP1:.*]] = memref.alloc() {{.*}} : memref<16xf32>
// CHECK: %[[TMP0:.*]] = memref.alloc() {{.*}} : memref<16xf32>
// CHECK: scf.for %[[IV:.*]] = {{.*}} iter_args(%[[OUT0:.*]] = %{{.*}}, %[[OUT1:.*]] = %{{.*}})
// CHECK-NOT: memref.alloc
// CHECK: %[[PREV:.*]] = arith.subi %[[IV]]
// CHECK: %[[ACC0:.*]] = memref.subview %[[OUT0]][%[[PREV]], 0] [1, 16] [1, 1]
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} ins(%[[ACC0]], {{.*}}) outs(%[[TMP0]] : memref<16xf32>)
// CHECK-NOT: memref.alloc
// CHECK: memref.copy %[[TMP0]], %{{.*}} : memref<16xf32> to memref<16xf32, strided<[1], offset: ?>>
// CHECK: memref.copy %[[TMP1]], %{{.*}} : memref<16xf32> to memref<16xf32, strided<[1], offset: ?>>
// CHECK: scf.yield %[[OUT0]], %[[OUT1]]
func.func @linear_recurrence(%a: tensor<1024x16xf32>, %b: tensor<1024x16xf32>) -> (tensor<1024x16xf32>, tensor<1024x16xf32>) {
  %r:2 = "tidal.associative_scan"(%a, %b) ({
  ^bb0(%a1: tensor<16xf32>, %b1: tensor<16xf32>, %a2: tensor<16xf32>, %b2: tensor<16xf32>):
    %e = tensor.empty() : tensor<16xf32>
    %aa = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%a1, %a2 : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      linalg.yield %m : f32
    } -> tensor<16xf32>
    %bb = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel"]} ins(%a2, %b1, %b2 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %s = arith.addf %m, %z : f32
      linalg.yield %s : f32
    } -> tensor<16xf32>
    "tidal.yield"(%aa, %bb) : (tensor<16xf32>, tensor<16xf32>) -> ()
  }) {num_xs = 2 : i64, dim = 0 : i64, reverse = false} : (tensor<1024x16xf32>, tensor<1024x16xf32>) -> (tensor<1024x16xf32>, tensor<1024x16xf32>)
  return %r#0, %r#1 : tensor<1024x16xf32>, tensor<1024x16xf32>
}

// The running product of `a` is dead: only `b`'s result is used and it reads `a`'s element, not
// its prefix. One result is carried and one generic computed per step.
// CHECK-LABEL: func.func @dead_product
// CHECK: memref.alloc() {{.*}} : memref<1024x16xf32>
// CHECK-NOT: memref.alloc() {{.*}} : memref<1024x16xf32>
// CHECK: scf.for %{{.*}} iter_args(%[[OUT:[^ ]*]] = %{{[^ ,]*}}) -> (memref<1024x16xf32>)
// CHECK: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: scf.yield %[[OUT]]
func.func @dead_product(%a: tensor<1024x16xf32>, %b: tensor<1024x16xf32>) -> tensor<1024x16xf32> {
  %r:2 = "tidal.associative_scan"(%a, %b) ({
  ^bb0(%a1: tensor<16xf32>, %b1: tensor<16xf32>, %a2: tensor<16xf32>, %b2: tensor<16xf32>):
    %e = tensor.empty() : tensor<16xf32>
    %aa = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%a1, %a2 : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      linalg.yield %m : f32
    } -> tensor<16xf32>
    %bb = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel"]} ins(%a2, %b1, %b2 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32, %o: f32):
      %m = arith.mulf %x, %y : f32
      %s = arith.addf %m, %z : f32
      linalg.yield %s : f32
    } -> tensor<16xf32>
    "tidal.yield"(%aa, %bb) : (tensor<16xf32>, tensor<16xf32>) -> ()
  }) {num_xs = 2 : i64, dim = 0 : i64, reverse = false} : (tensor<1024x16xf32>, tensor<1024x16xf32>) -> (tensor<1024x16xf32>, tensor<1024x16xf32>)
  return %r#1 : tensor<1024x16xf32>
}
