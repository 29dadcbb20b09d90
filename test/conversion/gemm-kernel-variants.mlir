// RUN: env TIDAL_GEMM=tidal tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-matmul-to-blas)' | filecheck %s
// A module gets the kernel's variants for the ways its own f32 gemms read B (each is ~1,500
// lines of MLIR to compile); a way it does not use is dispatched to BLAS, never to a missing
// function.

// B read as stored only: no packing variant.
// CHECK-LABEL: func.func private @tidal_sgemm_chunk(
// CHECK:         scf.if
// CHECK-NEXT:      func.call @tidal_sgemm_tiles(
// CHECK:         } else {
// CHECK-NEXT:      scf.if
// CHECK-NEXT:        func.call @tidal_sgemm_blas(
// CHECK:           } else {
// CHECK-NEXT:        func.call @tidal_sgemm_blas(
// CHECK-NOT:   @tidal_sgemm_tiles_bt
// CHECK:       func.func private @tidal_sgemm_tiles(
// CHECK-NOT:   @tidal_sgemm_tiles_bt
// CHECK-LABEL: func.func @nn
func.func @nn(%a: memref<4x8xf32>, %b: memref<8x5xf32>, %c: memref<4x5xf32>) {
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x5xf32>) outs(%c : memref<4x5xf32>)
  return
}

// -----

// B stored transposed only (a Linear's weight): the packing variant alone.
// CHECK-LABEL: func.func private @tidal_sgemm_chunk(
// CHECK:         scf.if
// CHECK-NEXT:      func.call @tidal_sgemm_blas(
// CHECK:         } else {
// CHECK-NEXT:      scf.if
// CHECK-NEXT:        func.call @tidal_sgemm_tiles_bt(
// CHECK:           } else {
// CHECK-NEXT:        func.call @tidal_sgemm_blas(
// CHECK-NOT:   func.func private @tidal_sgemm_tiles(
// CHECK:       func.func private @tidal_sgemm_tiles_bt(
// CHECK-NOT:   func.func private @tidal_sgemm_tiles(
// CHECK-LABEL: func.func @nt
func.func @nt(%a: memref<4x8xf32>, %bt: memref<5x8xf32>, %c: memref<4x5xf32>) {
  linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                 affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%a, %bt : memref<4x8xf32>, memref<5x8xf32>) outs(%c : memref<4x5xf32>)
  return
}
