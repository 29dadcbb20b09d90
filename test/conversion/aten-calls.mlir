// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-aten-calls)' | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-aten-calls{leftovers=1})' | filecheck %s
// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-torch-to-linalg, tidal-lower-to-scf, tidal-aten-calls-to-runtime)' | filecheck %s --check-prefix=CPU
// A library-kernel aten op becomes one tidal.aten_call with its constant arguments encoded, inside
// a loop body too. Other ops stay for torch-mlir; even with leftovers=1 (every op torch-mlir left),
// an op with a Scalar argument stays: the stable ABI's dispatcher cannot take one.

// CHECK-LABEL: func.func @sort_in_scan
// CHECK: "tidal.scan"
// CHECK: %[[R:.*]]:2 = "tidal.aten_call"(%{{.*}}) {args = [0 : index, 0, true], callee = "aten::sort", overload = ""} : (!torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],si64>)
// CHECK-NOT: torch.aten.sort
// CHECK: torch.aten.add.Scalar

// Results of static shape are written into buffers the caller allocates (so that a returned one
// can become the caller's output tensor); one of dynamic shape is allocated by the helper with
// the sizes ATen returned.
// CPU: func.func private @tidal_aten_call_0(%{{.*}}: memref<4xf32, strided<[?], offset: ?>>, %[[D0:.*]]: memref<4xf32>, %[[D1:.*]]: memref<4xi64>) {
// CPU: llvm.call @aoti_torch_create_tensor_from_blob
// CPU: llvm.call @torch_call_dispatcher
// CPU: llvm.call @tidal_report_aten_error
// CPU: llvm.call @aoti_torch_create_tensor_from_blob
// CPU: llvm.call @aoti_torch_copy_
// CPU: return{{$}}
// CPU: func.func private @tidal_aten_call_1(%{{.*}}: memref<?xf32, strided<[?], offset: ?>>) -> (memref<?xf32>, memref<?xi64>)
// CPU: llvm.call @aoti_torch_get_sizes
// CPU: %[[V:.*]] = memref.alloc(%{{.*}}) : memref<?xf32>
// CPU: llvm.call @aoti_torch_copy_
// CPU: return %[[V]], %{{.*}} : memref<?xf32>, memref<?xi64>
// CPU-LABEL: func.func @sort_in_scan
// CPU: scf.for
// CPU: bufferization.to_buffer %{{.*}} read_only : tensor<4xf32> to memref<4xf32, strided<[?], offset: ?>>
// CPU: %[[A:.*]] = memref.alloc() : memref<4xf32>
// CPU: %[[B:.*]] = memref.alloc() : memref<4xi64>
// CPU: func.call @tidal_aten_call_0(%{{.*}}, %[[A]], %[[B]]) : (memref<4xf32, strided<[?], offset: ?>>, memref<4xf32>, memref<4xi64>) -> ()
// CPU: bufferization.to_tensor %[[A]] restrict writable
// CPU: bufferization.to_tensor %[[B]] restrict writable
func.func @sort_in_scan(%init: !torch.vtensor<[4],f32>, %xs: !torch.vtensor<[3,4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[3,4],si64>) {
  %0:2 = "tidal.scan"(%init, %xs) ({
  ^bb0(%c: !torch.vtensor<[4],f32>, %x: !torch.vtensor<[4],f32>):
    %int0 = torch.constant.int 0
    %true = torch.constant.bool true
    %values, %indices = torch.aten.sort %c, %int0, %true : !torch.vtensor<[4],f32>, !torch.int, !torch.bool -> !torch.vtensor<[4],f32>, !torch.vtensor<[4],si64>
    %f = torch.constant.float 5.000000e-01
    %one = torch.constant.int 1
    %n = torch.aten.add.Scalar %values, %f, %one : !torch.vtensor<[4],f32>, !torch.float, !torch.int -> !torch.vtensor<[4],f32>
    "tidal.yield"(%n, %indices) : (!torch.vtensor<[4],f32>, !torch.vtensor<[4],si64>) -> ()
  }) {dim = 0 : i64, num_carries = 1 : i64, num_xs = 1 : i64, reverse = false} : (!torch.vtensor<[4],f32>, !torch.vtensor<[3,4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[3,4],si64>)
  return %0#0, %0#1 : !torch.vtensor<[4],f32>, !torch.vtensor<[3,4],si64>
}

// CHECK-LABEL: func.func @sort_dynamic
// CHECK: "tidal.aten_call"(%{{.*}}) {args = [0 : index, 0, false], callee = "aten::sort", overload = ""} : (!torch.vtensor<[?],f32>) -> (!torch.vtensor<[?],f32>, !torch.vtensor<[?],si64>)
// CPU-LABEL: func.func @sort_dynamic
// CPU: %[[R:.*]]:2 = call @tidal_aten_call_1(%{{.*}}) : (memref<?xf32, strided<[?], offset: ?>>) -> (memref<?xf32>, memref<?xi64>)
// CPU: bufferization.to_tensor %[[R]]#0 restrict writable
func.func @sort_dynamic(%x: !torch.vtensor<[?],f32>) -> (!torch.vtensor<[?],f32>, !torch.vtensor<[?],si64>) {
  %int0 = torch.constant.int 0
  %false = torch.constant.bool false
  %values, %indices = torch.aten.sort %x, %int0, %false : !torch.vtensor<[?],f32>, !torch.int, !torch.bool -> !torch.vtensor<[?],f32>, !torch.vtensor<[?],si64>
  return %values, %indices : !torch.vtensor<[?],f32>, !torch.vtensor<[?],si64>
}
