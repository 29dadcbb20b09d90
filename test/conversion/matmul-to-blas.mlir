// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-matmul-to-blas)' | filecheck %s
// Bufferized matmuls become BLAS calls: a transposed indexing map is BLAS's 'T' (84; 'N' is 78),
// a zero fill of C right before the matmul is BLAS's beta = 0 (the fill goes), and any other C
// is accumulated into (beta = 1).

#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b_t = affine_map<(d0, d1, d2) -> (d1, d2)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>

// CHECK-LABEL: func.func @overwrites_zeros
// CHECK-NOT:   linalg.fill
// CHECK:       %[[N:.+]] = arith.constant 78 : i8
// CHECK-NEXT:  %[[T:.+]] = arith.constant 84 : i8
// CHECK-NEXT:  %[[BETA:.+]] = arith.constant 0.000000e+00 : f32
// CHECK:       call @tidal_sgemm_rowmajor(%[[N]], %[[T]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[BETA]],
// CHECK-NOT:   linalg.matmul
func.func @overwrites_zeros(%a: memref<4x8xf32>, %b: memref<5x8xf32>, %c: memref<4x5xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<4x5xf32>)
  linalg.matmul indexing_maps = [#a, #b_t, #c] ins(%a, %b : memref<4x8xf32>, memref<5x8xf32>) outs(%c : memref<4x5xf32>)
  return
}

// C is read between the fill and the matmul: the fill stays and the matmul accumulates.
// CHECK-LABEL: func.func @read_between
// CHECK:       linalg.fill
// CHECK:       memref.load
// CHECK:       %[[N:.+]] = arith.constant 78 : i8
// CHECK-NEXT:  %[[N2:.+]] = arith.constant 78 : i8
// CHECK-NEXT:  %[[BETA:.+]] = arith.constant 1.000000e+00 : f32
// CHECK:       call @tidal_sgemm_rowmajor(%[[N]], %[[N2]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[BETA]],
func.func @read_between(%a: memref<4x8xf32>, %b: memref<8x5xf32>, %c: memref<4x5xf32>) -> f32 {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  linalg.fill ins(%zero : f32) outs(%c : memref<4x5xf32>)
  %v = memref.load %c[%i, %i] : memref<4x5xf32>
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x5xf32>) outs(%c : memref<4x5xf32>)
  return %v : f32
}

// A column-strided operand is not BLAS's: the matmul keeps its loops.
// CHECK-LABEL: func.func @strided_operand
// CHECK:       linalg.matmul
func.func @strided_operand(%a: memref<4x8xf32, strided<[1, 4]>>, %b: memref<8x5xf32>, %c: memref<4x5xf32>) {
  linalg.matmul ins(%a, %b : memref<4x8xf32, strided<[1, 4]>>, memref<8x5xf32>) outs(%c : memref<4x5xf32>)
  return
}

// An operand whose inner stride is known at run time only (a nested scan's carry through a view):
// the call where it is 1, the matmul's loops elsewhere; the zero fill stays (the loops need it) and
// the call accumulates into it.
// CHECK-LABEL: func.func @run_time_stride
// CHECK:       linalg.fill
// CHECK:       %{{.+}}, %[[STRIDES:.+]]:2 = memref.extract_strided_metadata %arg0
// CHECK:       %[[UNIT:.+]] = arith.cmpi eq, %[[STRIDES]]#1, %c1
// CHECK:       scf.if %[[UNIT]] {
// CHECK:         %[[BETA:.+]] = arith.constant 1.000000e+00 : f32
// CHECK:         call @tidal_sgemm_rowmajor({{.*}}, %[[BETA]],
// CHECK:       } else {
// CHECK-NEXT:    linalg.matmul ins(%arg0, %arg1
// CHECK-NEXT:  }
func.func @run_time_stride(%a: memref<4x8xf32, strided<[?, ?], offset: ?>>, %b: memref<8x5xf32>, %c: memref<4x5xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<4x5xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32, strided<[?, ?], offset: ?>>, memref<8x5xf32>) outs(%c : memref<4x5xf32>)
  return
}

// A batch matmul is one gemm per batch entry: each operand's entry found from its batch stride
// (0 for an operand broadcast over the batch); the zero fill before it is beta = 0 for every entry.
// The entries are a forall (run on the thread team) when more than one thread is allowed, the
// batch has more than one entry and B·M·N·K reaches 2^18 multiply-adds; else a sequential loop.
// CHECK-LABEL: func.func @batched
// CHECK-NOT:   linalg.fill
// CHECK:       arith.constant 78 : i8
// CHECK-NEXT:  arith.constant 78 : i8
// CHECK-NEXT:  %[[BETA:.+]] = arith.constant 0.000000e+00 : f64
// CHECK-DAG:   %[[A:.+]], %{{.+}}, %[[AS:.+]]:3, %[[AST:.+]]:3 = memref.extract_strided_metadata %arg0
// CHECK-DAG:   %[[C:.+]], %{{.+}}, %[[CS:.+]]:3, %{{.+}}:3 = memref.extract_strided_metadata %arg2
// CHECK:       %[[TEAM:.+]] = call @omp_get_max_threads()
// CHECK:       %[[THREADS:.+]] = arith.index_cast %[[TEAM]]
// CHECK:       %[[BM:.+]] = arith.muli %[[CS]]#0, %[[CS]]#1
// CHECK:       %[[NK:.+]] = arith.muli %[[CS]]#2, %[[AS]]#2
// CHECK:       %[[MACS:.+]] = arith.muli %[[BM]], %[[NK]]
// CHECK:       arith.cmpi sgt, %[[THREADS]], %[[ONE:.+]] : index
// CHECK:       arith.cmpi sgt, %[[CS]]#0, %[[ONE]] : index
// CHECK:       %[[MIN:.+]] = arith.constant 262144 : index
// CHECK:       arith.cmpi sge, %[[MACS]], %[[MIN]]
// CHECK:       scf.if
// CHECK-NEXT:    scf.forall (%[[J:.+]]) in (%[[CS]]#0)
// CHECK:           arith.muli %[[J]], %[[AST]]#0
// CHECK:           call @tidal_dgemm_rowmajor({{.*}}, %[[BETA]],
// CHECK:       } else {
// CHECK-NEXT:    scf.for %[[I:.+]] = %{{.+}} to %[[CS]]#0
// CHECK:           arith.muli %[[I]], %[[AST]]#0
// CHECK:           call @tidal_dgemm_rowmajor({{.*}}, %[[BETA]],
// CHECK-NOT:   linalg.batch_matmul
func.func @batched(%a: memref<3x4x8xf64>, %b: memref<3x8x5xf64, strided<[0, 5, 1]>>, %c: memref<3x4x5xf64>) {
  %zero = arith.constant 0.0 : f64
  linalg.fill ins(%zero : f64) outs(%c : memref<3x4x5xf64>)
  linalg.batch_matmul ins(%a, %b : memref<3x4x8xf64>, memref<3x8x5xf64, strided<[0, 5, 1]>>) outs(%c : memref<3x4x5xf64>)
  return
}
