// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(finalize-memref-to-llvm{use-generic-functions=true}, convert-func-to-llvm, reconcile-unrealized-casts, tidal-huge-page-buffers)' | filecheck %s
// Compiled code's buffers come from the allocation functions this pass defines: one of 4 MiB or
// more from the module's cache of freed buffers (guarded by a spin lock) or else from
// aligned_alloc on a 2 MiB boundary, its size rounded up to whole 2 MiB pages and advised
// MADV_HUGEPAGE (14), so its first touch faults once per 2 MiB rather than per 4 KiB, and its size
// remembered; a smaller one from malloc. `free` keeps a 2 MiB-aligned pointer whose remembered
// size libc's malloc_usable_size confirms and frees anything else. Only libc is called.

// CHECK-DAG:   llvm.func @malloc(i64) -> !llvm.ptr
// CHECK-DAG:   llvm.func @aligned_alloc(i64, i64) -> !llvm.ptr
// CHECK-DAG:   llvm.func @madvise(!llvm.ptr, i64, i32) -> i32
// CHECK-DAG:   llvm.func @free(!llvm.ptr)
// CHECK-DAG:   llvm.func @malloc_usable_size(!llvm.ptr) -> i64
// CHECK-DAG:   llvm.mlir.global internal @tidal_cached_ptr()
// CHECK-DAG:   llvm.mlir.global internal @tidal_live_ptr()
// CHECK-LABEL: llvm.func internal @tidal_buffers_acquire()
// CHECK:         llvm.atomicrmw xchg {{.*}} acquire
// CHECK-LABEL: llvm.func internal @tidal_buffers_release()
// CHECK:         llvm.store {{.*}} atomic release
// CHECK-LABEL: llvm.func internal @_mlir_memref_to_llvm_alloc(%{{.*}}: i64) -> !llvm.ptr
// CHECK:         llvm.mlir.constant(4194304 : i64)
// CHECK:         llvm.icmp "uge"
// CHECK:         llvm.mlir.constant(-2097152 : i64)
// CHECK:         llvm.call @tidal_cache_take(
// CHECK:         llvm.call @aligned_alloc(
// CHECK:         llvm.mlir.constant(14 : i32)
// CHECK:         llvm.call @madvise(
// CHECK:         llvm.call @tidal_live_record(
// CHECK:         llvm.call @malloc(
// CHECK-LABEL: llvm.func internal @_mlir_memref_to_llvm_free(
// CHECK:         llvm.mlir.constant(2097151 : i64)
// CHECK:         llvm.call @tidal_live_forget(
// CHECK:         llvm.call @malloc_usable_size(
// CHECK:         llvm.call @tidal_cache_keep(
// CHECK:         llvm.call @free(
// CHECK-LABEL: llvm.func @scratch
// CHECK:         llvm.call @_mlir_memref_to_llvm_alloc(
// CHECK:         llvm.call @_mlir_memref_to_llvm_free(
func.func @scratch(%n: index) {
  %a = memref.alloc(%n) : memref<?xf32>
  memref.dealloc %a : memref<?xf32>
  return
}

// -----

// Nothing allocated: nothing defined.
// CHECK-LABEL: llvm.func @pure
// CHECK-NOT:   _mlir_memref_to_llvm
func.func @pure(%x: f32) -> f32 {
  return %x : f32
}
