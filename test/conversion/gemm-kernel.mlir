// RUN: env TIDAL_GEMM=tidal tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas)' | filecheck %s
// RUN: env TIDAL_GEMM=blas tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas)' | filecheck %s --check-prefix=BLAS
// RUN: env TIDAL_GEMM=tidal tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas, convert-scf-to-cf, expand-strided-metadata, convert-vector-to-llvm, finalize-memref-to-llvm, convert-arith-to-llvm, convert-func-to-llvm, convert-cf-to-llvm, reconcile-unrealized-casts, tidal-llvm-contract)' | filecheck %s --check-prefix=LLVM
// With tidal's gemm kernel wanted (TIDAL_GEMM=tidal; by default on AVX-512 CPUs not made by
// Intel, where MKL runs its AVX2 code), the f32 shim sends a B read untransposed ('N' = 78) to
// @tidal_sgemm_tiles and the rest to MKL. The kernel keeps an 8x32 tile of C in sixteen 16-lane
// accumulators through the k loop: per k, two vector loads of B's row and eight broadcast elements
// of A; columns past the last full block of 32 are masked, rows past the last block of 8 go one
// at a time. f64 stays with BLAS.

// CHECK-LABEL: func.func private @tidal_sgemm_rowmajor(
// CHECK-SAME:    %[[TA:[^:]+]]: i8, %[[TB:[^:]+]]: i8
// CHECK:         %[[N:.+]] = arith.constant 78 : i8
// CHECK:         %[[UNTRANSPOSED:.+]] = arith.cmpi eq, %[[TB]], %[[N]] : i8
// CHECK:         scf.if %[[UNTRANSPOSED]] {
// CHECK-NEXT:      func.call @tidal_sgemm_tiles(%[[TA]],
// CHECK:         } else {
// CHECK-NEXT:      func.call @tidal_sgemm_blas(%[[TA]], %[[TB]],
// CHECK:       func.func private @tidal_sgemm_tiles(
// CHECK:         scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c32_i64
// CHECK:           scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c8_i64
// CHECK:             %[[INIT:.+]]:16 = scf.if
// CHECK:             scf.for {{.+}} iter_args({{.+}}) -> (vector<16xf32>, {{.+}}) : i64 {
// CHECK-COUNT-2:       llvm.load %{{.+}} -> vector<16xf32>
// CHECK-COUNT-8:       vector.fma
// CHECK-COUNT-8:       vector.fma
// CHECK:               scf.yield
// CHECK-COUNT-16:    llvm.store %{{.+}} : vector<16xf32>, !llvm.ptr
// CHECK:         scf.if %{{.+}} {
// CHECK:           arith.cmpi slt, %{{.+}} : vector<16xi64>
// CHECK:           llvm.intr.masked.load
// CHECK:           llvm.intr.masked.store
// CHECK:       func.func private @tidal_sgemm_blas(
// CHECK:         llvm.call @sgemm_(
// CHECK-LABEL: func.func @nn
// CHECK:         call @tidal_sgemm_rowmajor(
// CHECK-LABEL: func.func @f64
// CHECK:         call @tidal_dgemm_rowmajor(

// BLAS-NOT:    tidal_sgemm_tiles
// BLAS-LABEL:  func.func private @tidal_sgemm_rowmajor(
// BLAS:          llvm.call @sgemm_(

// The kernel lowers to LLVM (the CPU pipeline's conversions after tidal-matmul-to-blas) as
// AVX-512-width vector code.
// LLVM: llvm.func @tidal_sgemm_tiles(
// LLVM: llvm.intr.fmuladd({{.+}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// LLVM: llvm.intr.masked.load

func.func @nn(%a: memref<4x8xf32>, %b: memref<8x5xf32>, %c: memref<4x5xf32>) {
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x5xf32>) outs(%c : memref<4x5xf32>)
  return
}

func.func @f64(%a: memref<4x8xf64>, %b: memref<8x5xf64>, %c: memref<4x5xf64>) {
  linalg.matmul ins(%a, %b : memref<4x8xf64>, memref<8x5xf64>) outs(%c : memref<4x5xf64>)
  return
}
