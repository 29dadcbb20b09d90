// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-forall-to-threads)' | filecheck %s
// A bufferized 1-D scf.forall becomes a worker function started by GOMP_parallel on torch's
// OpenMP team; the values its body uses from above travel in a stack struct (memref
// descriptors, index values as i64, floats as they are); constants are rebuilt in the worker.

// CHECK-LABEL: func.func @scale
// CHECK-SAME: (%[[X:.*]]: memref<?xf32>, %[[S:.*]]: f32, %[[N:.*]]: index)
// CHECK: %[[SLOT:.*]] = llvm.alloca %{{.*}} x !llvm.struct<(i64, i64, i64, struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>, f32)>
// CHECK: %[[DESC:.*]] = builtin.unrealized_conversion_cast %[[X]] : memref<?xf32> to !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK: llvm.insertvalue %[[DESC]], %{{.*}}[3]
// CHECK: llvm.insertvalue %[[S]], %{{.*}}[4]
// CHECK: llvm.store %{{.*}}, %[[SLOT]]
// CHECK: %[[FN:.*]] = constant @__tidal_parallel_0 : (!llvm.ptr) -> ()
// CHECK: %[[FNP:.*]] = builtin.unrealized_conversion_cast %[[FN]] : (!llvm.ptr) -> () to !llvm.ptr
// CHECK: call @GOMP_parallel(%[[FNP]], %[[SLOT]], %c0_i32, %c0_i32)
// CHECK-NOT: scf.forall
// CHECK: func.func private @__tidal_parallel_0(%[[CTX:.*]]: !llvm.ptr)
// CHECK:   arith.constant 2.000000e+00 : f32
// CHECK:   %[[ALL:.*]] = llvm.load %[[CTX]]
// CHECK:   %[[XD:.*]] = llvm.extractvalue %[[ALL]][3]
// CHECK:   %[[SW:.*]] = llvm.extractvalue %[[ALL]][4]
// CHECK:   %[[XW:.*]] = builtin.unrealized_conversion_cast %[[XD]] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> to memref<?xf32>
// CHECK:   call @omp_get_thread_num()
// CHECK:   call @omp_get_num_threads()
// CHECK:   scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:     %[[I:.*]] = arith.addi
// CHECK:     memref.load %[[XW]][%[[I]]]
// CHECK:     arith.mulf %{{.*}}, %[[SW]]
// CHECK:     memref.store
// CHECK: func.func private @GOMP_parallel(!llvm.ptr, !llvm.ptr, i32, i32)
func.func @scale(%x: memref<?xf32>, %s: f32, %n: index) {
  %two = arith.constant 2.0 : f32
  scf.forall (%i) in (%n) {
    %v = memref.load %x[%i] : memref<?xf32>
    %w = arith.mulf %v, %s : f32
    %z = arith.mulf %w, %two : f32
    memref.store %z, %x[%i] : memref<?xf32>
  }
  return
}

// -----

// Only the outermost forall of a nest is outlined; a 2-D forall is left for scf-forall-to-for.
// CHECK-LABEL: func.func @nest
// CHECK: call @GOMP_parallel
// CHECK-NOT: scf.forall
// CHECK-LABEL: func.func @two_d
// CHECK-NOT: GOMP_parallel
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (4, 4)
// CHECK: func.func private @__tidal_parallel_0
// CHECK: scf.forall (%{{.*}}) in (4)
func.func @nest(%x: memref<4x4xf32>) {
  scf.forall (%i) in (4) {
    scf.forall (%j) in (4) {
      %v = memref.load %x[%i, %j] : memref<4x4xf32>
      memref.store %v, %x[%j, %i] : memref<4x4xf32>
    }
  }
  return
}
func.func @two_d(%x: memref<4x4xf32>) {
  scf.forall (%i, %j) in (4, 4) {
    %v = memref.load %x[%i, %j] : memref<4x4xf32>
    memref.store %v, %x[%j, %i] : memref<4x4xf32>
  }
  return
}
