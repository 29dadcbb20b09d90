// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-torch-to-linalg, tidal-lower-to-scf, tidal-aten-calls-to-runtime)' | filecheck %s
// A 2-D f32 convolution of static shapes runs channels-last on the CPU: its input and weight are
// permuted to NHWC by generics (which elementwise fusion can fold into their producers), handed
// to ATen as NCHW views of those buffers (channels-last strides), and the result comes back as an
// NHWC buffer, copied in memory order, permuted back by a generic. oneDNN reorders NCHW tensors
// to blocked formats and back on every call; channels-last it does not (about 2x at [8,32,32,32]).

// CHECK-DAG: #[[TO_NHWC:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[TO_NCHW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>
// CHECK: func.func private @tidal_aten_call_0(%{{.*}}: memref<2x3x8x8xf32, strided<[?, ?, ?, ?], offset: ?>>, %{{.*}}: memref<4x3x3x3xf32, strided<[?, ?, ?, ?], offset: ?>>, %{{.*}}: memref<4xf32, strided<[?], offset: ?>>, %[[OUT:.*]]: memref<2x8x8x4xf32>) {
// CHECK: %[[VIEW:.*]] = memref.transpose %[[OUT]] (d0, d1, d2, d3) -> (d0, d3, d1, d2) : memref<2x8x8x4xf32> to memref<2x4x8x8xf32, strided<[256, 1, 32, 4]>>
// CHECK: memref.extract_strided_metadata %[[VIEW]]
// CHECK: llvm.call @aoti_torch_copy_
// CHECK: return{{$}}

// CHECK-LABEL: func.func @conv
// CHECK: %[[X:.*]] = linalg.generic {indexing_maps = [#[[TO_NHWC]], #[[ID]]]{{.*}} ins(%{{.*}} : tensor<2x3x8x8xf32>) outs(%{{.*}} : tensor<2x8x8x3xf32>)
// CHECK: %[[XB:.*]] = bufferization.to_buffer %[[X]] read_only : tensor<2x8x8x3xf32> to memref<2x8x8x3xf32>
// CHECK: %[[XV:.*]] = memref.transpose %[[XB]] (d0, d1, d2, d3) -> (d0, d3, d1, d2) : memref<2x8x8x3xf32> to memref<2x3x8x8xf32, strided<[192, 1, 24, 3]>>
// CHECK: memref.cast %[[XV]]
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<4x3x3x3xf32>) outs(%{{.*}} : tensor<4x3x3x3xf32>)
// CHECK: %[[R:.*]] = memref.alloc() : memref<2x8x8x4xf32>
// CHECK: call @tidal_aten_call_0({{.*}}, %[[R]])
// CHECK: %[[RT:.*]] = bufferization.to_tensor %[[R]] restrict writable : memref<2x8x8x4xf32> to tensor<2x8x8x4xf32>
// CHECK: %[[Y:.*]] = linalg.generic {indexing_maps = [#[[TO_NCHW]], #[[ID]]]{{.*}} ins(%[[RT]] : tensor<2x8x8x4xf32>) outs(%{{.*}} : tensor<2x4x8x8xf32>)
// CHECK: return %[[Y]]
func.func @conv(%x: !torch.vtensor<[2,3,8,8],f32>, %w: !torch.vtensor<[4,3,3,3],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,4,8,8],f32> {
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %false = torch.constant.bool false
  %ones = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %zeros = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %y = torch.aten.convolution %x, %w, %b, %ones, %ones, %ones, %false, %zeros, %int1 : !torch.vtensor<[2,3,8,8],f32>, !torch.vtensor<[4,3,3,3],f32>, !torch.vtensor<[4],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[2,4,8,8],f32>
  return %y : !torch.vtensor<[2,4,8,8],f32>
}
