// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-linalg-to-llvm)' | filecheck %s
// The whole program, loop included, becomes LLVM: the while loop is a branch cycle inside @main,
// the matmul a call to the in-process BLAS gemm, tanh a rational polynomial (no libm call).

// CHECK-DAG: llvm.func @sgemm_(
// CHECK-DAG: llvm.func @tidal_sgemm_rowmajor(
// CHECK-DAG: llvm.call @sgemm_(
// CHECK-LABEL: llvm.func @main(
// CHECK: ^[[HEAD:.*]](%{{.*}}):
// CHECK: llvm.cond_br
// CHECK: llvm.call @tidal_sgemm_rowmajor(
// CHECK-NOT: tanhf
// CHECK: llvm.br ^[[HEAD]]
// CHECK-NOT: tidal.
// CHECK: llvm.func @_mlir_ciface_main(
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %n: tensor<i64>) -> tensor<4x8xf32> attributes {llvm.emit_c_interface} {
  %i0 = arith.constant dense<0> : tensor<i64>
  %r:2 = "tidal.while"(%i0, %x, %w, %n) ({
  ^bb0(%i: tensor<i64>, %h: tensor<4x8xf32>, %cw: tensor<8x8xf32>, %cn: tensor<i64>):
    %a = tensor.extract %i[] : tensor<i64>
    %b = tensor.extract %cn[] : tensor<i64>
    %lt = arith.cmpi slt, %a, %b : i64
    %p = tensor.from_elements %lt : tensor<i1>
    "tidal.yield"(%p) : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i64>, %h: tensor<4x8xf32>, %cw: tensor<8x8xf32>, %cn: tensor<i64>):
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %m = linalg.matmul ins(%h, %cw : tensor<4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %v = math.tanh %in : f32
      linalg.yield %v : f32
    } -> tensor<4x8xf32>
    %one = arith.constant 1 : i64
    %iv = tensor.extract %i[] : tensor<i64>
    %inc = arith.addi %iv, %one : i64
    %i1 = tensor.from_elements %inc : tensor<i64>
    "tidal.yield"(%i1, %t) : (tensor<i64>, tensor<4x8xf32>) -> ()
  }) {num_carries = 2 : i64} : (tensor<i64>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<i64>) -> (tensor<i64>, tensor<4x8xf32>)
  return %r#1 : tensor<4x8xf32>
}
