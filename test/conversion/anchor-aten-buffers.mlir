// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-anchor-aten-buffers)' | filecheck %s
// One-Shot bufferization sees a tensor read at its to_buffer. A to_buffer that code motion moved
// out of a loop (or that cse shared between calls) is taken again right before each ATen helper
// call, with the views between it and the call; the moved one goes once unused.

func.func private @tidal_aten_call_0(memref<4xi64, strided<[?], offset: ?>>, memref<4xi64, strided<[?], offset: ?>>)
func.func private @other(memref<4xi64, strided<[?], offset: ?>>)

// CHECK-LABEL: func.func @hoisted
// CHECK-SAME: (%[[T:.*]]: tensor<4xi64>, %[[U:.*]]: tensor<4xi64>)
// CHECK: %[[KEPT:.*]] = bufferization.to_buffer %[[U]] read_only
// CHECK: scf.for
// CHECK-NEXT: %[[B:.*]] = bufferization.to_buffer %[[T]] read_only
// CHECK-NEXT: %[[C:.*]] = memref.cast %[[B]]
// CHECK-NEXT: %[[B2:.*]] = bufferization.to_buffer %[[T]] read_only
// CHECK-NEXT: %[[C2:.*]] = memref.cast %[[B2]]
// CHECK-NEXT: func.call @tidal_aten_call_0(%[[C]], %[[C2]])
// CHECK-NEXT: func.call @other(%[[KEPT]])
// CHECK-NOT: bufferization.to_buffer
func.func @hoisted(%t: tensor<4xi64>, %u: tensor<4xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %b = bufferization.to_buffer %t read_only : tensor<4xi64> to memref<4xi64>
  %cast = memref.cast %b : memref<4xi64> to memref<4xi64, strided<[?], offset: ?>>
  %kept = bufferization.to_buffer %u read_only : tensor<4xi64> to memref<4xi64, strided<[?], offset: ?>>
  scf.for %i = %c0 to %c4 step %c1 {
    func.call @tidal_aten_call_0(%cast, %cast) : (memref<4xi64, strided<[?], offset: ?>>, memref<4xi64, strided<[?], offset: ?>>) -> ()
    func.call @other(%kept) : (memref<4xi64, strided<[?], offset: ?>>) -> ()
  }
  return
}
