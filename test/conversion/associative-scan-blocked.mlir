// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-lower-to-scf)' | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-lower-to-scf, tidal-parallelism-to-threads, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}, tidal-forall-to-threads, scf-forall-to-for)' | filecheck %s --check-prefix=THREADS
// A scan that may be long gets the blocked form beside the sequential loop, chosen at run time
// from the target's parallel width (tidal.parallelism; the CPU's is its OpenMP team, lowered by
// tidal-parallelism-to-threads): block scans in parallel (scf.forall), a sequential scan of the block
// totals, block re-scans from their carries in parallel. Each forall runs on the OpenMP team.
// Only a compute-bound combine gets it (here log(exp(a) + exp(b))); one of elementwise
// arithmetic runs at memory bandwidth on one core and keeps the sequential loop alone.

#map = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @long_scan
// CHECK: %[[TEAM:.*]] = "tidal.parallelism"() : () -> index
// CHECK: %[[TWO:.*]] = arith.cmpi sge, %[[TEAM]], %c2
// CHECK: %[[LONG:.*]] = arith.cmpi sge, %{{.*}}, %c8192
// CHECK: %[[PAR:.*]] = arith.andi %[[TWO]], %[[LONG]]
// CHECK: scf.if %[[PAR]]
// CHECK:   scf.forall (%[[J:.*]]) in (%{{.*}}) shared_outs(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<16384x16xf32>, tensor<?x16xf32>)
// CHECK:     scf.for
// CHECK:       math.log
// CHECK:     scf.forall.in_parallel
// CHECK:       tensor.parallel_insert_slice {{.*}} : tensor<?x16xf32> into tensor<16384x16xf32>
// CHECK:       tensor.parallel_insert_slice {{.*}} : tensor<16xf32> into tensor<?x16xf32>
// CHECK:   scf.for
// CHECK:     math.log
// CHECK:   scf.forall (%{{.*}}) = (1) to (%{{.*}}) step (1) shared_outs
// CHECK:     math.log
// CHECK:     scf.for
// CHECK:       math.log
// CHECK: } else {
// CHECK:   scf.for %{{.*}} = %c1 to %c16384
// CHECK:     math.log
// CHECK-NOT: tidal.associative_scan

// THREADS-LABEL: func.func @long_scan
// THREADS: %[[N:.*]] = call @omp_get_max_threads() : () -> i32
// THREADS: arith.index_cast %[[N]] : i32 to index
// THREADS-NOT: scf.forall
// THREADS: call @GOMP_parallel(%{{.*}}, %{{.*}}, %c0_i32, %c0_i32) : (!llvm.ptr, !llvm.ptr, i32, i32) -> ()
// THREADS: scf.for
// THREADS: call @GOMP_parallel
// THREADS: func.func private @__tidal_parallel_0(%[[CTX:.*]]: !llvm.ptr)
// THREADS:   llvm.load %[[CTX]]
// THREADS:   call @omp_get_thread_num()
// THREADS:   call @omp_get_num_threads()
// THREADS:   scf.for
// THREADS: func.func private @__tidal_parallel_1(%{{.*}}: !llvm.ptr)
func.func @long_scan(%x: tensor<16384x16xf32>) -> tensor<16384x16xf32> {
  %r = "tidal.associative_scan"(%x) ({
  ^bb0(%l: tensor<16xf32>, %rr: tensor<16xf32>):
    %e = tensor.empty() : tensor<16xf32>
    %m = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%l, %rr : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %ea = math.exp %a : f32
      %eb = math.exp %b : f32
      %s = arith.addf %ea, %eb : f32
      %p = math.log %s : f32
      linalg.yield %p : f32
    } -> tensor<16xf32>
    "tidal.yield"(%m) : (tensor<16xf32>) -> ()
  }) {num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<16384x16xf32>) -> tensor<16384x16xf32>
  return %r : tensor<16384x16xf32>
}

// CHECK-LABEL: func.func @memory_bound_scan
// CHECK-NOT: tidal.parallelism
// CHECK-NOT: scf.forall
// CHECK: scf.for %{{.*}} = %c1 to %c16384
// CHECK: arith.mulf
// CHECK: return
func.func @memory_bound_scan(%x: tensor<16384x16xf32>) -> tensor<16384x16xf32> {
  %r = "tidal.associative_scan"(%x) ({
  ^bb0(%l: tensor<16xf32>, %rr: tensor<16xf32>):
    %e = tensor.empty() : tensor<16xf32>
    %m = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%l, %rr : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      linalg.yield %p : f32
    } -> tensor<16xf32>
    "tidal.yield"(%m) : (tensor<16xf32>) -> ()
  }) {num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<16384x16xf32>) -> tensor<16384x16xf32>
  return %r : tensor<16384x16xf32>
}
