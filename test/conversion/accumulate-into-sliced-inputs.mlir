// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-accumulate-into-sliced-inputs)' | filecheck %s
// RUN: tidal-opt %s --split-input-file --pass-pipeline='builtin.module(tidal-accumulate-into-sliced-inputs, tidal-read-only-arguments, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}, cse, canonicalize)' | filecheck %s --check-prefix=BUF
// A temporary read one slice per iteration, each slice accumulated into by the step's matmul
// (a scan's hoisted x_t @ W plus h @ U), becomes an iter_arg updated in place: no copy of the
// slice per step once bufferized.

// CHECK-LABEL: func.func @hoisted_product
// CHECK:       %[[XW:.*]] = tensor.expand_shape
// CHECK:       %[[R:.*]]:2 = scf.for %[[IV:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[H:.*]] = %arg0, %[[ACC:.*]] = %[[XW]])
// CHECK:         %[[S:.*]] = tensor.extract_slice %[[ACC]][%[[IV]], 0, 0] [1, 2, 4] [1, 1, 1]
// CHECK:         %[[M:.*]] = linalg.matmul ins(%[[H]], %arg2 : tensor<2x4xf32>, tensor<4x4xf32>) outs(%[[S]] : tensor<2x4xf32>)
// CHECK:         %[[BACK:.*]] = tensor.insert_slice %[[M]] into %[[ACC]][%[[IV]], 0, 0] [1, 2, 4] [1, 1, 1]
// CHECK:         scf.yield %[[M]], %[[BACK]]
// CHECK:       return %[[R]]#0
// BUF-LABEL:   func.func @hoisted_product
// BUF:         scf.for
// BUF-NOT:       memref.alloc
// BUF-NOT:       memref.copy
// BUF:           linalg.matmul
// BUF:         }
func.func @hoisted_product(%h0: tensor<2x4xf32>, %xs: tensor<24x4xf32>, %u: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<24x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<24x4xf32>) -> tensor<24x4xf32>
  %flat = linalg.matmul ins(%xs, %w : tensor<24x4xf32>, tensor<4x4xf32>) outs(%z : tensor<24x4xf32>) -> tensor<24x4xf32>
  %xw = tensor.expand_shape %flat [[0, 1], [2]] output_shape [12, 2, 4] : tensor<24x4xf32> into tensor<12x2x4xf32>
  %r = scf.for %i = %c0 to %c12 step %c1 iter_args(%h = %h0) -> (tensor<2x4xf32>) {
    %s = tensor.extract_slice %xw[%i, 0, 0] [1, 2, 4] [1, 1, 1] : tensor<12x2x4xf32> to tensor<2x4xf32>
    %m = linalg.matmul ins(%h, %u : tensor<2x4xf32>, tensor<4x4xf32>) outs(%s : tensor<2x4xf32>) -> tensor<2x4xf32>
    scf.yield %m : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}

// -----

// Counting down (a reverse scan reads T-1-i) is distinct per iteration too; a read of the
// temporary before the loop (a peeled first step) does not stop it.
// CHECK-LABEL: func.func @reverse_after_peeled_step
// CHECK:       tensor.extract_slice %[[XW:[a-z0-9_]+]][11, 0] [1, 4]
// CHECK:       scf.for %{{.*}} = %{{.*}} iter_args(%{{.*}} = %{{.*}}, %[[ACC:.*]] = %[[XW]])
// CHECK:         %[[POS:.*]] = arith.subi
// CHECK:         tensor.extract_slice %[[ACC]][%[[POS]], 0] [1, 4]
// CHECK:         tensor.insert_slice %{{.*}} into %[[ACC]][%[[POS]], 0] [1, 4]
func.func @reverse_after_peeled_step(%h0: tensor<1x4xf32>, %xs: tensor<12x4xf32>, %w: tensor<4x4xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  %c1 = arith.constant 1 : index
  %c11 = arith.constant 11 : index
  %c12 = arith.constant 12 : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<12x4xf32>) -> tensor<12x4xf32>
  %xw = linalg.matmul ins(%xs, %w : tensor<12x4xf32>, tensor<4x4xf32>) outs(%z : tensor<12x4xf32>) -> tensor<12x4xf32>
  %first = tensor.extract_slice %xw[11, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
  %r = scf.for %i = %c1 to %c12 step %c1 iter_args(%h = %h0) -> (tensor<1x4xf32>) {
    %pos = arith.subi %c11, %i : index
    %s = tensor.extract_slice %xw[%pos, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
    %m = linalg.matmul ins(%h, %w : tensor<1x4xf32>, tensor<4x4xf32>) outs(%s : tensor<1x4xf32>) -> tensor<1x4xf32>
    scf.yield %m : tensor<1x4xf32>
  }
  return %r, %first : tensor<1x4xf32>, tensor<1x4xf32>
}

// -----

// Left alone: the temporary is read after the loop (threading it would copy all of it before
// the loop), a slice at the same position every iteration (a later iteration would read what an
// earlier one wrote), an argument (not the function's to write), and a temporary read outside
// the region holding the loop (found by a fuzzed program: the walk up from that read must stop
// at the function).
// CHECK-LABEL: func.func @read_after_loop
// CHECK:       scf.for %{{.*}} iter_args(%{{[a-z0-9_]+}} = %arg0) -> (tensor<1x4xf32>)
// CHECK-LABEL: func.func @same_slice_every_iteration
// CHECK:       scf.for %{{.*}} iter_args(%{{[a-z0-9_]+}} = %arg0) -> (tensor<1x4xf32>)
// CHECK-LABEL: func.func @argument
// CHECK:       scf.for %{{.*}} iter_args(%{{[a-z0-9_]+}} = %arg0) -> (tensor<1x4xf32>)
// CHECK-LABEL: func.func @read_outside_the_loops_region
// CHECK:       scf.for %{{.*}} iter_args(%{{[a-z0-9_]+}} = %arg0) -> (tensor<1x4xf32>)
func.func @read_after_loop(%h0: tensor<1x4xf32>, %xs: tensor<12x4xf32>, %w: tensor<4x4xf32>) -> (tensor<1x4xf32>, tensor<12x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<12x4xf32>) -> tensor<12x4xf32>
  %xw = linalg.matmul ins(%xs, %w : tensor<12x4xf32>, tensor<4x4xf32>) outs(%z : tensor<12x4xf32>) -> tensor<12x4xf32>
  %r = scf.for %i = %c0 to %c12 step %c1 iter_args(%h = %h0) -> (tensor<1x4xf32>) {
    %s = tensor.extract_slice %xw[%i, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
    %m = linalg.matmul ins(%h, %w : tensor<1x4xf32>, tensor<4x4xf32>) outs(%s : tensor<1x4xf32>) -> tensor<1x4xf32>
    scf.yield %m : tensor<1x4xf32>
  }
  return %r, %xw : tensor<1x4xf32>, tensor<12x4xf32>
}

func.func @same_slice_every_iteration(%h0: tensor<1x4xf32>, %xs: tensor<12x4xf32>, %w: tensor<4x4xf32>) -> tensor<1x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<12x4xf32>) -> tensor<12x4xf32>
  %xw = linalg.matmul ins(%xs, %w : tensor<12x4xf32>, tensor<4x4xf32>) outs(%z : tensor<12x4xf32>) -> tensor<12x4xf32>
  %r = scf.for %i = %c0 to %c12 step %c1 iter_args(%h = %h0) -> (tensor<1x4xf32>) {
    %s = tensor.extract_slice %xw[%c1, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
    %m = linalg.matmul ins(%h, %w : tensor<1x4xf32>, tensor<4x4xf32>) outs(%s : tensor<1x4xf32>) -> tensor<1x4xf32>
    scf.yield %m : tensor<1x4xf32>
  }
  return %r : tensor<1x4xf32>
}

func.func @argument(%h0: tensor<1x4xf32>, %xw: tensor<12x4xf32>, %w: tensor<4x4xf32>) -> tensor<1x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %r = scf.for %i = %c0 to %c12 step %c1 iter_args(%h = %h0) -> (tensor<1x4xf32>) {
    %s = tensor.extract_slice %xw[%i, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
    %m = linalg.matmul ins(%h, %w : tensor<1x4xf32>, tensor<4x4xf32>) outs(%s : tensor<1x4xf32>) -> tensor<1x4xf32>
    scf.yield %m : tensor<1x4xf32>
  }
  return %r : tensor<1x4xf32>
}

func.func @read_outside_the_loops_region(%h0: tensor<1x4xf32>, %xs: tensor<12x4xf32>, %w: tensor<4x4xf32>, %p: i1) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<12x4xf32>) -> tensor<12x4xf32>
  %xw = linalg.matmul ins(%xs, %w : tensor<12x4xf32>, tensor<4x4xf32>) outs(%z : tensor<12x4xf32>) -> tensor<12x4xf32>
  %first = tensor.extract_slice %xw[0, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
  %r = scf.if %p -> (tensor<1x4xf32>) {
    %l = scf.for %i = %c0 to %c12 step %c1 iter_args(%h = %h0) -> (tensor<1x4xf32>) {
      %s = tensor.extract_slice %xw[%i, 0] [1, 4] [1, 1] : tensor<12x4xf32> to tensor<1x4xf32>
      %m = linalg.matmul ins(%h, %w : tensor<1x4xf32>, tensor<4x4xf32>) outs(%s : tensor<1x4xf32>) -> tensor<1x4xf32>
      scf.yield %m : tensor<1x4xf32>
    }
    scf.yield %l : tensor<1x4xf32>
  } else {
    scf.yield %h0 : tensor<1x4xf32>
  }
  return %r, %first : tensor<1x4xf32>, tensor<1x4xf32>
}
