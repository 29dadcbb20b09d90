// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-transposes-to-generics)' | filecheck %s --check-prefix=GEN
// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-tile-elementwise)' | filecheck %s
// A permute read only by generics becomes a generic (elementwise fusion then folds it into its
// consumer); one feeding anything else stays a linalg.transpose. A generic or transpose that
// reads an input transposed runs in 16x16 tiles: a parallel loop over the outer dim (threads),
// 16 vector reads of 16 contiguous lanes, a shuffle transpose, 16 contiguous vector writes.
// Left alone: a tiled dim not a multiple of 16, 64-bit elements, a transpose that moves nothing.

// GEN-DAG: #[[READ:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
// GEN-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// GEN-LABEL: func.func @permute_then_add
// GEN-NOT: linalg.transpose
// GEN: %[[P:.*]] = linalg.generic {indexing_maps = [#[[READ]], #[[ID]]]{{.*}} ins(%arg0 : tensor<2x32x16x48xf32>)
// GEN: linalg.generic {{.*}} ins(%[[P]]

// CHECK-LABEL: func.func @permute_then_add
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for
// CHECK: vector.transfer_read %arg0{{.*}} : tensor<2x32x16x48xf32>, vector<16x1x16xf32>
// CHECK-COUNT-64: vector.shuffle
// CHECK: vector.transfer_write {{.*}} : vector<16x16xf32>, tensor<1x16x48x32xf32>
// CHECK: tensor.parallel_insert_slice
func.func @permute_then_add(%x: tensor<2x32x16x48xf32>) -> tensor<2x16x48x32xf32> {
  %e = tensor.empty() : tensor<2x16x48x32xf32>
  %t = linalg.transpose ins(%x : tensor<2x32x16x48xf32>) outs(%e : tensor<2x16x48x32xf32>) permutation = [0, 2, 3, 1]
  %one = arith.constant 1.0 : f32
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%t : tensor<2x16x48x32xf32>) outs(%e : tensor<2x16x48x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<2x16x48x32xf32>
  return %r : tensor<2x16x48x32xf32>
}

// A fused body (scale of a transposed input plus a broadcast bias) is tiled too.
// CHECK-LABEL: func.func @fused_transposed_read
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK: vector.shuffle
// CHECK: arith.mulf {{.*}} : vector<16x16xf32>
// CHECK: arith.addf {{.*}} : vector<16x16xf32>
func.func @fused_transposed_read(%x: tensor<16x32xf32>, %b: tensor<16xf32>) -> tensor<32x16xf32> {
  %e = tensor.empty() : tensor<32x16xf32>
  %two = arith.constant 2.0 : f32
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %b : tensor<16x32xf32>, tensor<16xf32>) outs(%e : tensor<32x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %two : f32
    %s = arith.addf %m, %c : f32
    linalg.yield %s : f32
  } -> tensor<32x16xf32>
  return %r : tensor<32x16xf32>
}

// GEN-LABEL: func.func @left_alone
// GEN: linalg.transpose
// A per-channel scale viewed as [1, C, 1, 1] (GroupNorm's affine before a channels-last
// convolution's NCHW->NHWC permute) is read through its [C] source: one vector along the lanes,
// broadcast over the tile's rows, not 16 scalars transposed with the input.
// CHECK-LABEL: func.func @channel_scale_through_unit_dims
// CHECK: vector.transfer_read %arg0{{.*}} : tensor<2x32x16x48xf32>, vector<16x1x16xf32>
// CHECK: %[[SCALE:.*]] = vector.transfer_read %arg1[%{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<32xf32>, vector<16xf32>
// CHECK: vector.broadcast %[[SCALE]] : vector<16xf32> to vector<16x16xf32>
// CHECK-NOT: tensor<1x32x1x1xf32>
func.func @channel_scale_through_unit_dims(%x: tensor<2x32x16x48xf32>, %g: tensor<32xf32>) -> tensor<2x16x48x32xf32> {
  %e = tensor.empty() : tensor<2x16x48x32xf32>
  %g4 = tensor.expand_shape %g [[0, 1, 2, 3]] output_shape [1, 32, 1, 1] : tensor<32xf32> into tensor<1x32x1x1xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (0, d3, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x, %g4 : tensor<2x32x16x48xf32>, tensor<1x32x1x1xf32>) outs(%e : tensor<2x16x48x32xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x16x48x32xf32>
  return %r : tensor<2x16x48x32xf32>
}

// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: vector.
// CHECK-NOT: scf.forall
// CHECK: return
func.func @left_alone(%x: tensor<4x24x16xf32>, %y: tensor<32x16xf64>, %z: tensor<8x32x16xf32>) -> (tensor<4x16x24xf32>, tensor<16x32xf64>, tensor<8x32x16xf32>) {
  %e0 = tensor.empty() : tensor<4x16x24xf32>
  %t0 = linalg.transpose ins(%x : tensor<4x24x16xf32>) outs(%e0 : tensor<4x16x24xf32>) permutation = [0, 2, 1]
  %e1 = tensor.empty() : tensor<16x32xf64>
  %t1 = linalg.transpose ins(%y : tensor<32x16xf64>) outs(%e1 : tensor<16x32xf64>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<8x32x16xf32>
  %t2 = linalg.transpose ins(%z : tensor<8x32x16xf32>) outs(%e2 : tensor<8x32x16xf32>) permutation = [0, 1, 2]
  return %t0, %t1, %t2 : tensor<4x16x24xf32>, tensor<16x32xf64>, tensor<8x32x16xf32>
}

// Inside a loop body the tiles' parallel loop would start the thread team on every iteration:
// left alone there.
// CHECK-LABEL: func.func @in_a_loop
// CHECK: scf.for
// CHECK-NOT: scf.forall
// CHECK: linalg.transpose
func.func @in_a_loop(%x: tensor<32x32xf32>, %n: index) -> tensor<32x32xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<32x32xf32>) {
    %e = tensor.empty() : tensor<32x32xf32>
    %t = linalg.transpose ins(%acc : tensor<32x32xf32>) outs(%e : tensor<32x32xf32>) permutation = [1, 0]
    scf.yield %t : tensor<32x32xf32>
  }
  return %r : tensor<32x32xf32>
}

// Rows: no input read transposed, rows of 32 (which LLVM would unroll into scalar code) and at
// least 65536 elements: tiles of 1x16, vector reads, arithmetic and writes along the row. The
// broadcast per-row operand is read at the same index on every step of the innermost loop
// (loop-invariant-code-motion, which runs after this pass, takes it out).
// CHECK-LABEL: func.func @short_rows
// CHECK: scf.forall (%{{.*}}) in (64)
// CHECK: scf.for
// CHECK: scf.for {{.*}} step %c16
// CHECK: %[[X:.*]] = vector.transfer_read %arg0{{.*}} : tensor<64x32x32xf32>, vector<16xf32>
// CHECK: %[[M:.*]] = vector.transfer_read %arg1[%{{.*}}, %{{.*}}, %c0]{{.*}} : tensor<64x32x1xf32>, vector<f32>
// CHECK: %[[B:.*]] = vector.broadcast %[[M]] : vector<f32> to vector<16xf32>
// CHECK: arith.subf %[[X]], %[[B]] : vector<16xf32>
// CHECK: vector.transfer_write {{.*}} : vector<16xf32>, tensor<1x32x32xf32>
func.func @short_rows(%x: tensor<64x32x32xf32>, %m: tensor<64x32x1xf32>) -> tensor<64x32x32xf32> {
  %e = tensor.empty() : tensor<64x32x32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m : tensor<64x32x32xf32>, tensor<64x32x1xf32>) outs(%e : tensor<64x32x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x32x32xf32>
  return %r : tensor<64x32x32xf32>
}

// Left to LLVM: rows longer than 64 (its loop vectorizer handles them), and ops under 65536
// elements (tidal-parallelize-generics runs them, grouped with their neighbours).
// CHECK-LABEL: func.func @long_rows_or_small
// CHECK-NOT: vector.
// CHECK: linalg.generic
// CHECK: linalg.generic
func.func @long_rows_or_small(%x: tensor<128x128xf32>, %y: tensor<8x4x32xf32>) -> (tensor<128x128xf32>, tensor<8x4x32xf32>) {
  %e = tensor.empty() : tensor<128x128xf32>
  %one = arith.constant 1.0 : f32
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<128x128xf32>) outs(%e : tensor<128x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<128x128xf32>
  %e1 = tensor.empty() : tensor<8x4x32xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%y : tensor<8x4x32xf32>) outs(%e1 : tensor<8x4x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<8x4x32xf32>
  return %r, %r1 : tensor<128x128xf32>, tensor<8x4x32xf32>
}

// Rows of a 3-D op and a 4-D permute both tile their dim 2: each is tiled for its own rank (the
// marks once named only the dim, and the 3-D script tiled the permute as 1x1x16 with whole 32-lane
// columns, a generic 512-lane shuffle).
// CHECK-LABEL: func.func @two_ranks_one_dim
// CHECK: vector.transfer_read %arg0{{.*}} : tensor<64x32x32xf32>, vector<16xf32>
// CHECK: vector.transfer_read %arg1{{.*}} : tensor<2x32x16x32xf32>, vector<16x1x16xf32>
// CHECK-NOT: vector<512xf32>
// CHECK: return
func.func @two_ranks_one_dim(%x: tensor<64x32x32xf32>, %y: tensor<2x32x16x32xf32>) -> (tensor<64x32x32xf32>, tensor<2x16x32x32xf32>) {
  %e0 = tensor.empty() : tensor<64x32x32xf32>
  %one = arith.constant 1.0 : f32
  %r0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<64x32x32xf32>) outs(%e0 : tensor<64x32x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<64x32x32xf32>
  %e1 = tensor.empty() : tensor<2x16x32x32xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<2x32x16x32xf32>) outs(%e1 : tensor<2x16x32x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<2x16x32x32xf32>
  return %r0, %r1 : tensor<64x32x32xf32>, tensor<2x16x32x32xf32>
}

// Dynamic dims (Dynamo's symbolic sizes): the generic's init takes them from the transposed input.
// GEN-LABEL: func.func @permute_dynamic_then_add
// GEN-NOT: linalg.transpose
// GEN-DAG: %[[D0:.*]] = tensor.dim %arg0, %c0
// GEN-DAG: %[[D1:.*]] = tensor.dim %arg0, %c1
// GEN: tensor.empty(%[[D1]], %[[D0]]) : tensor<?x?xf32>
func.func @permute_dynamic_then_add(%x: tensor<?x?xf32>, %e: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %t = linalg.transpose ins(%x : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) permutation = [1, 0]
  %one = arith.constant 1.0 : f32
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %one : f32
    linalg.yield %s : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
