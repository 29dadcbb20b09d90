// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fold-into-matmul, canonicalize)' | filecheck %s
// A transposed operand becomes the matmul's transposed indexing map (BLAS reads it with 'T', no
// copy); an add of the matmul's result into an accumulator becomes the matmul's init (BLAS beta=1).

#id = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-DAG:   #[[A_T:.+]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG:   #[[A:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG:   #[[B:.+]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG:   #[[B_T:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG:   #[[C:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG:   #[[BA:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG:   #[[BB_T:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-DAG:   #[[BC:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>

// CHECK-LABEL: func.func @transposed_lhs
// CHECK-NOT:   linalg.transpose
// CHECK:       linalg.matmul indexing_maps = [#[[A_T]], #[[B]], #[[C]]] ins(%arg0, %arg1 : tensor<8x4xf32>, tensor<8x5xf32>)
func.func @transposed_lhs(%x: tensor<8x4xf32>, %w: tensor<8x5xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<4x8xf32>
  %xt = linalg.transpose ins(%x : tensor<8x4xf32>) outs(%et : tensor<4x8xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<4x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%xt, %w : tensor<4x8xf32>, tensor<8x5xf32>) outs(%z : tensor<4x5xf32>) -> tensor<4x5xf32>
  return %m : tensor<4x5xf32>
}

// CHECK-LABEL: func.func @accumulated
// CHECK-SAME:  (%[[ACC:[a-z0-9]+]]: tensor<4x5xf32>, %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[W:[a-z0-9]+]]: tensor<5x8xf32>)
// CHECK-NOT:   linalg.fill
// CHECK:       %[[M:.+]] = linalg.matmul indexing_maps = [#[[A]], #[[B_T]], #[[C]]] ins(%[[X]], %[[W]] : tensor<4x8xf32>, tensor<5x8xf32>) outs(%[[ACC]] : tensor<4x5xf32>)
// CHECK-NOT:   linalg.generic
// CHECK:       return %[[M]]
func.func @accumulated(%acc: tensor<4x5xf32>, %x: tensor<4x8xf32>, %w: tensor<5x8xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<8x5xf32>
  %wt = linalg.transpose ins(%w : tensor<5x8xf32>) outs(%et : tensor<8x5xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<4x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%x, %wt : tensor<4x8xf32>, tensor<8x5xf32>) outs(%z : tensor<4x5xf32>) -> tensor<4x5xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%m, %acc : tensor<4x5xf32>, tensor<4x5xf32>) outs(%e : tensor<4x5xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x5xf32>
  return %s : tensor<4x5xf32>
}

// The product is used twice: the add cannot take it over.
// CHECK-LABEL: func.func @product_used_twice
// CHECK:       %[[M:.+]] = linalg.matmul ins
// CHECK:       linalg.generic
// CHECK:       return %{{.+}}, %[[M]]
func.func @product_used_twice(%acc: tensor<4x5xf32>, %x: tensor<4x8xf32>, %w: tensor<8x5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x5xf32>) outs(%z : tensor<4x5xf32>) -> tensor<4x5xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%m, %acc : tensor<4x5xf32>, tensor<4x5xf32>) outs(%e : tensor<4x5xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x5xf32>
  return %s, %m : tensor<4x5xf32>, tensor<4x5xf32>
}

// Not an add (a product of the two): nothing to fold.
// CHECK-LABEL: func.func @not_an_add
// CHECK:       linalg.fill
// CHECK:       linalg.matmul ins
// CHECK:       arith.mulf
func.func @not_an_add(%acc: tensor<4x5xf32>, %x: tensor<4x8xf32>, %w: tensor<8x5xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x5xf32>) outs(%z : tensor<4x5xf32>) -> tensor<4x5xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%m, %acc : tensor<4x5xf32>, tensor<4x5xf32>) outs(%e : tensor<4x5xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.mulf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x5xf32>
  return %s : tensor<4x5xf32>
}

// The accumulator is computed after the product: the folded matmul goes where the add was.
// CHECK-LABEL: func.func @accumulator_after_product
// CHECK:       %[[ACC:.+]] = linalg.generic
// CHECK:       arith.mulf
// CHECK:       linalg.matmul ins(%arg1, %arg2 : tensor<4x8xf32>, tensor<8x5xf32>) outs(%[[ACC]] : tensor<4x5xf32>)
func.func @accumulator_after_product(%y: tensor<4x5xf32>, %x: tensor<4x8xf32>, %w: tensor<8x5xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x5xf32>) outs(%z : tensor<4x5xf32>) -> tensor<4x5xf32>
  %acc = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<4x5xf32>) outs(%e : tensor<4x5xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %a : f32
    linalg.yield %r : f32
  } -> tensor<4x5xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%acc, %m : tensor<4x5xf32>, tensor<4x5xf32>) outs(%e : tensor<4x5xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x5xf32>
  return %s : tensor<4x5xf32>
}

// A loop's matmul by the transpose of a matrix the loop does not change (an RNN adjoint's dh·Uᵀ):
// the transpose moves before the loop, once per call, and each step's matmul reads it untransposed
// (BLAS's NN kernel, faster than NT at these sizes). Two transposes sharing one init both move.
// CHECK-LABEL: func.func @invariant_weight_in_loop
// CHECK-SAME:  (%[[H:[a-z0-9]+]]: tensor<4x8xf32>, %[[U:[a-z0-9]+]]: tensor<8x8xf32>, %[[V:[a-z0-9]+]]: tensor<8x8xf32>)
// CHECK:       %[[UT:.+]] = linalg.transpose ins(%[[U]] : tensor<8x8xf32>)
// CHECK:       %[[VT:.+]] = linalg.transpose ins(%[[V]] : tensor<8x8xf32>)
// CHECK:       scf.for
// CHECK-NOT:   linalg.transpose
// CHECK:       linalg.matmul ins(%{{.*}}, %[[UT]] : tensor<4x8xf32>, tensor<8x8xf32>)
// CHECK:       linalg.matmul ins(%{{.*}}, %[[VT]] : tensor<4x8xf32>, tensor<8x8xf32>)
func.func @invariant_weight_in_loop(%h0: tensor<4x8xf32>, %u: tensor<8x8xf32>, %v: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %zero = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %c16 step %c1 iter_args(%h = %h0) -> (tensor<4x8xf32>) {
    %et = tensor.empty() : tensor<8x8xf32>
    %ut = linalg.transpose ins(%u : tensor<8x8xf32>) outs(%et : tensor<8x8xf32>) permutation = [1, 0]
    %e = tensor.empty() : tensor<4x8xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %m = linalg.matmul ins(%h, %ut : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    %vt = linalg.transpose ins(%v : tensor<8x8xf32>) outs(%et : tensor<8x8xf32>) permutation = [1, 0]
    %n = linalg.matmul ins(%m, %vt : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    scf.yield %n : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// The transposed matrix changes with each step: read with 'T' inside the loop.
// CHECK-LABEL: func.func @variant_matrix_in_loop
// CHECK:       scf.for
// CHECK-NOT:   linalg.transpose
// CHECK:       linalg.matmul indexing_maps = [#[[A]], #[[B_T]], #[[C]]]
func.func @variant_matrix_in_loop(%h0: tensor<4x8xf32>, %ws: tensor<16x8x8xf32>) -> tensor<4x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %zero = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %c16 step %c1 iter_args(%h = %h0) -> (tensor<4x8xf32>) {
    %w = tensor.extract_slice %ws[%i, 0, 0] [1, 8, 8] [1, 1, 1] : tensor<16x8x8xf32> to tensor<8x8xf32>
    %et = tensor.empty() : tensor<8x8xf32>
    %wt = linalg.transpose ins(%w : tensor<8x8xf32>) outs(%et : tensor<8x8xf32>) permutation = [1, 0]
    %e = tensor.empty() : tensor<4x8xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %m = linalg.matmul ins(%h, %wt : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    scf.yield %m : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// A batch of transposed matrices (q @ kᵀ in attention): the batch matmul reads each entry with 'T'.
// CHECK-LABEL: func.func @batch_transposed_rhs
// CHECK-NOT:   linalg.transpose
// CHECK:       linalg.batch_matmul indexing_maps = [#[[BA]], #[[BB_T]], #[[BC]]] ins(%arg0, %arg1 : tensor<4x6x8xf32>, tensor<4x5x8xf32>)
func.func @batch_transposed_rhs(%q: tensor<4x6x8xf32>, %k: tensor<4x5x8xf32>) -> tensor<4x6x5xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<4x8x5xf32>
  %kt = linalg.transpose ins(%k : tensor<4x5x8xf32>) outs(%et : tensor<4x8x5xf32>) permutation = [0, 2, 1]
  %e = tensor.empty() : tensor<4x6x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  %m = linalg.batch_matmul ins(%q, %kt : tensor<4x6x8xf32>, tensor<4x8x5xf32>) outs(%z : tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  return %m : tensor<4x6x5xf32>
}

// A batch transposed other than entry by entry is left as it is.
// CHECK-LABEL: func.func @batch_dim_transposed
// CHECK:       linalg.transpose
// CHECK:       linalg.batch_matmul ins
func.func @batch_dim_transposed(%q: tensor<4x6x8xf32>, %k: tensor<8x4x5xf32>) -> tensor<4x6x5xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<4x8x5xf32>
  %kt = linalg.transpose ins(%k : tensor<8x4x5xf32>) outs(%et : tensor<4x8x5xf32>) permutation = [1, 0, 2]
  %e = tensor.empty() : tensor<4x6x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  %m = linalg.batch_matmul ins(%q, %kt : tensor<4x6x8xf32>, tensor<4x8x5xf32>) outs(%z : tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  return %m : tensor<4x6x5xf32>
}

// A batch of matrices times one matrix repeated along the batch (a Linear on a 3-d input traced
// as bmm by the expanded weight) is one matmul of the batch's rows: the repeat is never written.
// CHECK-LABEL: func.func @batch_by_one_matrix
// CHECK-SAME:  (%[[X:[a-z0-9]+]]: tensor<6x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8x5xf32>)
// CHECK:       %[[ROWS:.+]] = tensor.collapse_shape %[[X]] {{\[\[}}0, 1], [2]] : tensor<6x4x8xf32> into tensor<24x8xf32>
// CHECK:       %[[M:.+]] = linalg.matmul ins(%[[ROWS]], %[[W]] : tensor<24x8xf32>, tensor<8x5xf32>)
// CHECK:       %[[OUT:.+]] = tensor.expand_shape %[[M]] {{\[\[}}0, 1], [2]] output_shape [6, 4, 5] : tensor<24x5xf32> into tensor<6x4x5xf32>
// CHECK-NOT:   linalg.batch_matmul
// CHECK:       return %[[OUT]]
func.func @batch_by_one_matrix(%x: tensor<6x4x8xf32>, %w: tensor<8x5xf32>) -> tensor<6x4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %ew = tensor.empty() : tensor<6x8x5xf32>
  %ws = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                        iterator_types = ["parallel", "parallel", "parallel"]} ins(%w : tensor<8x5xf32>) outs(%ew : tensor<6x8x5xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<6x8x5xf32>
  %e = tensor.empty() : tensor<6x4x5xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<6x4x5xf32>) -> tensor<6x4x5xf32>
  %m = linalg.batch_matmul ins(%x, %ws : tensor<6x4x8xf32>, tensor<6x8x5xf32>) outs(%z : tensor<6x4x5xf32>) -> tensor<6x4x5xf32>
  return %m : tensor<6x4x5xf32>
}
