// RUN: env TIDAL_GEMM=tidal tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas)' | filecheck %s
// RUN: env TIDAL_GEMM=blas tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas)' | filecheck %s --check-prefix=BLAS
// RUN: env TIDAL_GEMM=tidal tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas, tidal-forall-to-threads, scf-forall-to-for, convert-scf-to-cf, expand-strided-metadata, convert-vector-to-llvm, finalize-memref-to-llvm, convert-arith-to-llvm, convert-func-to-llvm, convert-cf-to-llvm, reconcile-unrealized-casts, tidal-llvm-contract)' | filecheck %s --check-prefix=LLVM
// With tidal's gemm kernel wanted (TIDAL_GEMM=tidal; by default on AVX-512 CPUs not made by
// Intel, where MKL runs its AVX2 code), the f32 shim sends B read untransposed ('N' = 78) to
// @tidal_sgemm_tiles, B stored transposed with k <= 2048 to @tidal_sgemm_tiles_bt (which packs
// each 32 columns of Bᵀ into a stack panel), and the rest to MKL. Each splits a gemm of at least
// 2^19 multiply-adds over the thread team (by column blocks, or row blocks when there is one
// column block), and its part keeps an 8x32 tile of C in sixteen 16-lane accumulators through
// the k loop: per k, two vector loads of B's row and eight broadcast elements of A; columns past
// the last full block of 32 are masked, rows past the last block of 8 go one at a time. f64
// stays with BLAS. A k past 2048 runs as chunks of 256, C accumulating (the kernel does not block
// k: a long one's B panel left L2).

// CHECK-LABEL: func.func private @tidal_sgemm_chunk(
// CHECK-SAME:    %[[TA:[^:]+]]: i8, %[[TB:[^:]+]]: i8, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %[[K:[^:]+]]: i64
// CHECK:         %[[N:.+]] = arith.constant 78 : i8
// CHECK:         %[[UNTRANSPOSED:.+]] = arith.cmpi eq, %[[TB]], %[[N]] : i8
// CHECK:         %[[MAXK:.+]] = arith.constant 2048 : i64
// CHECK:         %[[SHORT:.+]] = arith.cmpi sle, %[[K]], %[[MAXK]] : i64
// CHECK:         scf.if %[[UNTRANSPOSED]] {
// CHECK-NEXT:      func.call @tidal_sgemm_tiles(%[[TA]],
// CHECK:         } else {
// CHECK-NEXT:      scf.if %[[SHORT]] {
// CHECK-NEXT:        func.call @tidal_sgemm_tiles_bt(%[[TA]],
// CHECK:           } else {
// CHECK-NEXT:        func.call @tidal_sgemm_blas(%[[TA]], %[[TB]],

// CHECK-LABEL: func.func private @tidal_sgemm_rowmajor(
// CHECK-SAME:    %[[RTA:[^:]+]]: i8, %[[RTB:[^:]+]]: i8, %{{[^:]+}}: i64, %{{[^:]+}}: i64, %[[RK:[^:]+]]: i64
// CHECK:         %[[CHUNK:.+]] = arith.constant 256 : i64
// CHECK:         %[[UNBLOCKED:.+]] = arith.constant 2048 : i64
// CHECK:         %[[LONG:.+]] = arith.cmpi sgt, %[[RK]], %[[UNBLOCKED]] : i64
// CHECK:         scf.if %[[LONG]] {
// CHECK:           scf.for %{{.+}} = %{{.+}} to %[[RK]] step %[[CHUNK]]
// CHECK:             arith.minsi
// CHECK:             func.call @tidal_sgemm_chunk(%[[RTA]], %[[RTB]],
// CHECK:         } else {
// CHECK-NEXT:      func.call @tidal_sgemm_chunk(%[[RTA]], %[[RTB]], %{{.+}}, %{{.+}}, %[[RK]],

// CHECK:       func.func private @tidal_sgemm_tiles_bt(
// CHECK:         call @omp_get_max_threads()
// CHECK:         %[[MIN:.+]] = arith.constant 524288 : i64
// CHECK:         arith.cmpi sge, %{{.+}}, %[[MIN]] : i64
// CHECK:         scf.if
// CHECK:           scf.forall
// CHECK:             func.call @tidal_sgemm_tiles_bt_part(
// CHECK:             func.call @tidal_sgemm_tiles_bt_part(
// CHECK:         } else {
// CHECK-NEXT:      func.call @tidal_sgemm_tiles_bt_part(
// CHECK:       func.func private @tidal_sgemm_tiles_bt_part(
// CHECK:         llvm.alloca %{{.+}} x f32 {alignment = 64 : i64}
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK-COUNT-16:    llvm.intr.masked.load
// CHECK-COUNT-64:    vector.shuffle
// CHECK-COUNT-16:    llvm.store %{{.+}} : vector<16xf32>, !llvm.ptr
// CHECK:           }
// CHECK:           scf.for
// CHECK-COUNT-16:    llvm.intr.masked.load
// CHECK-COUNT-64:    vector.shuffle

// CHECK:       func.func private @tidal_sgemm_tiles(
// CHECK:         scf.forall
// CHECK:             func.call @tidal_sgemm_tiles_part(
// CHECK:       func.func private @tidal_sgemm_tiles_part(
// CHECK:         scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c32_i64
// CHECK:           scf.if
// CHECK:             scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c8_i64
// CHECK:               %[[INIT:.+]]:16 = scf.if
// CHECK:               scf.for {{.+}} iter_args({{.+}}) -> (vector<16xf32>, {{.+}}) : i64 {
// CHECK-COUNT-2:         llvm.load %{{.+}} -> vector<16xf32>
// CHECK-COUNT-8:         vector.fma
// CHECK-COUNT-8:         vector.fma
// CHECK:                 scf.yield
// CHECK-COUNT-16:      llvm.store %{{.+}} : vector<16xf32>, !llvm.ptr
// CHECK:           } else {
// CHECK:             arith.cmpi slt, %{{.+}} : vector<16xi64>
// CHECK:             llvm.intr.masked.load
// CHECK:             llvm.intr.masked.store
// CHECK:       func.func private @tidal_sgemm_blas(
// CHECK:         llvm.call @sgemm_(
// CHECK-LABEL: func.func @nn
// CHECK:         call @tidal_sgemm_rowmajor(
// CHECK-LABEL: func.func @nt
// CHECK:         call @tidal_sgemm_rowmajor(
// CHECK-LABEL: func.func @f64
// CHECK:         call @tidal_dgemm_rowmajor(

// BLAS-NOT:    tidal_sgemm_tiles
// BLAS-LABEL:  func.func private @tidal_sgemm_rowmajor(
// BLAS:          llvm.call @sgemm_(

// The kernel lowers to LLVM (the CPU pipeline's conversions after tidal-matmul-to-blas) as
// AVX-512-width vector code.
// LLVM: llvm.call @GOMP_parallel
// LLVM: llvm.func @tidal_sgemm_tiles_part(
// LLVM: llvm.intr.fmuladd({{.+}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// LLVM: llvm.intr.masked.load

func.func @nn(%a: memref<4x8xf32>, %b: memref<8x5xf32>, %c: memref<4x5xf32>) {
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x5xf32>) outs(%c : memref<4x5xf32>)
  return
}

func.func @nt(%a: memref<4x8xf32>, %bt: memref<5x8xf32>, %c: memref<4x5xf32>) {
  linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                 affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%a, %bt : memref<4x8xf32>, memref<5x8xf32>) outs(%c : memref<4x5xf32>)
  return
}

func.func @f64(%a: memref<4x8xf64>, %b: memref<8x5xf64>, %c: memref<4x5xf64>) {
  linalg.matmul ins(%a, %b : memref<4x8xf64>, memref<8x5xf64>) outs(%c : memref<4x5xf64>)
  return
}
