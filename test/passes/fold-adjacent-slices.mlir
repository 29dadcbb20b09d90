// RUN: tidal-opt %s --pass-pipeline='builtin.module(tidal-fold-adjacent-slices)' | filecheck %s
// A concat of unit-stride slices of one tensor, adjacent along the concat dim, whole in the
// others and covering it from 0 to its end, is that tensor (an adjoint's x̄_0 = G_0 joined to
// x̄_{1..} = G_{1..}); a gap, an overlap, a partial other dim, a second source or a zero piece keep it.

// CHECK-LABEL: func.func @tiles
// CHECK-NOT:   tensor.concat
// CHECK:       return %arg0
func.func @tiles(%g: tensor<6x2x3xf32>) -> tensor<6x2x3xf32> {
  %first = tensor.extract_slice %g[0, 0, 0] [1, 2, 3] [1, 1, 1] : tensor<6x2x3xf32> to tensor<1x2x3xf32>
  %rest = tensor.extract_slice %g[1, 0, 0] [5, 2, 3] [1, 1, 1] : tensor<6x2x3xf32> to tensor<5x2x3xf32>
  %c = tensor.concat dim(0) %first, %rest : (tensor<1x2x3xf32>, tensor<5x2x3xf32>) -> tensor<6x2x3xf32>
  return %c : tensor<6x2x3xf32>
}

// CHECK-LABEL: func.func @middle_dim_three_pieces
// CHECK-NOT:   tensor.concat
// CHECK:       return %arg0
func.func @middle_dim_three_pieces(%g: tensor<2x7x3xf32>) -> tensor<2x7x3xf32> {
  %a = tensor.extract_slice %g[0, 0, 0] [2, 2, 3] [1, 1, 1] : tensor<2x7x3xf32> to tensor<2x2x3xf32>
  %b = tensor.extract_slice %g[0, 2, 0] [2, 4, 3] [1, 1, 1] : tensor<2x7x3xf32> to tensor<2x4x3xf32>
  %c = tensor.extract_slice %g[0, 6, 0] [2, 1, 3] [1, 1, 1] : tensor<2x7x3xf32> to tensor<2x1x3xf32>
  %r = tensor.concat dim(1) %a, %b, %c : (tensor<2x2x3xf32>, tensor<2x4x3xf32>, tensor<2x1x3xf32>) -> tensor<2x7x3xf32>
  return %r : tensor<2x7x3xf32>
}

// CHECK-LABEL: func.func @shifted
// CHECK:       tensor.concat
func.func @shifted(%g: tensor<6x3xf32>) -> tensor<6x3xf32> {
  %rest = tensor.extract_slice %g[1, 0] [5, 3] [1, 1] : tensor<6x3xf32> to tensor<5x3xf32>
  %first = tensor.extract_slice %g[0, 0] [1, 3] [1, 1] : tensor<6x3xf32> to tensor<1x3xf32>
  %c = tensor.concat dim(0) %rest, %first : (tensor<5x3xf32>, tensor<1x3xf32>) -> tensor<6x3xf32>
  return %c : tensor<6x3xf32>
}

// CHECK-LABEL: func.func @gap
// CHECK:       tensor.concat
func.func @gap(%g: tensor<7x3xf32>) -> tensor<6x3xf32> {
  %a = tensor.extract_slice %g[0, 0] [1, 3] [1, 1] : tensor<7x3xf32> to tensor<1x3xf32>
  %b = tensor.extract_slice %g[2, 0] [5, 3] [1, 1] : tensor<7x3xf32> to tensor<5x3xf32>
  %c = tensor.concat dim(0) %a, %b : (tensor<1x3xf32>, tensor<5x3xf32>) -> tensor<6x3xf32>
  return %c : tensor<6x3xf32>
}

// CHECK-LABEL: func.func @partial_other_dim
// CHECK:       tensor.concat
func.func @partial_other_dim(%g: tensor<6x4xf32>) -> tensor<6x3xf32> {
  %a = tensor.extract_slice %g[0, 0] [1, 3] [1, 1] : tensor<6x4xf32> to tensor<1x3xf32>
  %b = tensor.extract_slice %g[1, 0] [5, 3] [1, 1] : tensor<6x4xf32> to tensor<5x3xf32>
  %c = tensor.concat dim(0) %a, %b : (tensor<1x3xf32>, tensor<5x3xf32>) -> tensor<6x3xf32>
  return %c : tensor<6x3xf32>
}

// CHECK-LABEL: func.func @two_sources
// CHECK:       tensor.concat
func.func @two_sources(%g: tensor<6x3xf32>, %h: tensor<6x3xf32>) -> tensor<6x3xf32> {
  %a = tensor.extract_slice %g[0, 0] [1, 3] [1, 1] : tensor<6x3xf32> to tensor<1x3xf32>
  %b = tensor.extract_slice %h[1, 0] [5, 3] [1, 1] : tensor<6x3xf32> to tensor<5x3xf32>
  %c = tensor.concat dim(0) %a, %b : (tensor<1x3xf32>, tensor<5x3xf32>) -> tensor<6x3xf32>
  return %c : tensor<6x3xf32>
}

// CHECK-LABEL: func.func @zero_first
// CHECK:       tensor.concat
func.func @zero_first(%g: tensor<6x3xf32>) -> tensor<6x3xf32> {
  %z = arith.constant dense<0.0> : tensor<1x3xf32>
  %b = tensor.extract_slice %g[1, 0] [5, 3] [1, 1] : tensor<6x3xf32> to tensor<5x3xf32>
  %c = tensor.concat dim(0) %z, %b : (tensor<1x3xf32>, tensor<5x3xf32>) -> tensor<6x3xf32>
  return %c : tensor<6x3xf32>
}
